-- rw_holder_gone(key, base, field, poll, me): put before the read-write lock's acquire scripts,
-- after lua/presence.lua. holder_gone for the owner of `field` of lock hash `key` (a reader's
-- '<owner>', or a writer's '<owner>:write'); when it answers 0 (the owner's process is gone
-- for its grace), every hold of that owner is taken out of the hash first: its write field, its
-- read field and its read holds' timeout keys (<base>:<owner>:rwlock_timeout:<k>).
local function rw_holder_gone(key, base, field, poll, me)
  local owner = string.match(field, '^(.*):write$') or field
  local gone = holder_gone(owner, poll, me)
  if gone == 0 then
    local reads = tonumber(redis.call('hget', key, owner)) or 0
    for k = 1, reads do
      redis.call('del', base .. ':' .. owner .. ':rwlock_timeout:' .. k)
    end
    redis.call('hdel', key, owner, owner .. ':write')
  end
  return gone
end

-- The field of the write hold in lock hash `key` (mode 'write'), or nil.
local function write_field(key)
  for _, field in ipairs(redis.call('hkeys', key)) do
    if string.sub(field, -6) == ':write' then
      return field
    end
  end
  return nil
end

