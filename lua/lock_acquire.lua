-- Takes an RLock, or one more hold of it for its owner (reentrancy).
--
-- KEYS[1]  the lock: a hash, field <owner> -> hold count, PEXPIRE = lease
-- KEYS[2]  the fencing counter of the lock name (a string, never expires)
-- ARGV[1]  owner (<client-uuid>:<n>)
-- ARGV[2]  lease in milliseconds
--
-- Replies:
--   {1, token}  granted anew; token is the counter after its INCR
--   {2, token}  granted again to the owner that holds it (TTL reset to the lease); token is the
--               counter's current value, which no grant has moved since the owner got the lock
--   {0, pttl}   held by another owner; pttl is the lock's remaining TTL in ms, -1 without TTL
-- Errors: WRONGTYPE when a key holds another type. Every check comes before the first write, so
-- an error changes nothing.

local kind = redis.call('type', KEYS[1]).ok
if kind ~= 'none' and kind ~= 'hash' then
  return redis.error_reply('WRONGTYPE key ' .. KEYS[1] .. ' holds a ' .. kind)
end

local counter = redis.pcall('get', KEYS[2])
if type(counter) == 'table' or (counter and not tonumber(counter)) then
  return redis.error_reply('WRONGTYPE key ' .. KEYS[2] .. ' holds no counter')
end

-- The INCR is the first write: if the server refuses writes (OOM, READONLY), nothing changes.
if kind == 'none' then
  local token = redis.call('incr', KEYS[2])
  redis.call('hset', KEYS[1], ARGV[1], 1)
  redis.call('pexpire', KEYS[1], ARGV[2])
  return {1, token}
end

if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[1], 1)
  redis.call('pexpire', KEYS[1], ARGV[2])
  return {2, tonumber(counter) or 0}
end

return {0, redis.call('pttl', KEYS[1])}
