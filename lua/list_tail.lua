
end

-- One KEYS and one ARGV table serve every operation in turn (a table each would cost Redis
-- about as much as the call that the list saves).
local keys, args, replies = {}, {}, {}
local k, a, n, nk, na = 1, 1, #ARGV, 0, 0
while a <= n do
  local was_nk, was_na = nk, na
  nk, na = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  for i = 1, nk do
    keys[i] = KEYS[k + i - 1]
  end
  for i = nk + 1, was_nk do
    keys[i] = nil
  end
  for i = 1, na do
    args[i] = ARGV[a + 1 + i]
  end
  for i = na + 1, was_na do
    args[i] = nil
  end
  k = k + nk
  a = a + 2 + na
  local ok, reply = pcall(one, keys, args)
  if not ok then
    -- Raised: Redis 7 raises a command's error as a table, older servers as a string.
    replies[#replies + 1] = 1
    replies[#replies + 1] = type(reply) == 'table' and reply.err or tostring(reply)
  elseif type(reply) == 'table' and reply.err then
    replies[#replies + 1] = 1
    replies[#replies + 1] = reply.err
  else
    replies[#replies + 1] = 0
    replies[#replies + 1] = reply == nil and false or reply
  end
end
return replies
