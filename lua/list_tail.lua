
end

-- One KEYS and one ARGV table serve every operation in turn (a table each would cost Redis
-- about as much as the call that the list saves), and the loop does no more than it must: it
-- is paid for every operation.
local keys, args, replies = {}, {}, {}
local k, a, r, n, nk, na = 0, 1, 0, #ARGV, 0, 0
while a <= n do
  local was_nk, was_na = nk, na
  nk, na = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  for i = 1, nk do
    keys[i] = KEYS[k + i]
  end
  for i = nk + 1, was_nk do
    keys[i] = nil
  end
  a = a + 1
  for i = 1, na do
    args[i] = ARGV[a + i]
  end
  for i = na + 1, was_na do
    args[i] = nil
  end
  k = k + nk
  a = a + na + 1
  local ok, reply = pcall(one, keys, args)
  r = r + 2
  if not ok then
    -- Raised: Redis 7 raises a command's error as a table, older servers as a string.
    replies[r - 1] = 1
    replies[r] = type(reply) == 'table' and reply.err or tostring(reply)
  elseif type(reply) == 'table' and reply.err then
    replies[r - 1] = 1
    replies[r] = reply.err
  else
    replies[r - 1] = 0
    -- nil would leave a hole that ends the array: it goes as false, which Redis answers as nil.
    if reply == nil then
      reply = false
    end
    replies[r] = reply
  end
end
return replies
