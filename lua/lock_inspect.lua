-- Reads a lock's state in one round trip, without changing it.
--
-- KEYS[1]  the lock hash
-- ARGV[1]  the owner asking
--
-- Reply: {locked, holds, pttl}: locked 1 when anybody holds the lock, else 0; holds, the hold
-- count of ARGV[1] (0 when none); pttl, the lock's remaining TTL in ms (-2 when free, -1 when
-- it has no TTL).
-- Errors: WRONGTYPE when the key holds another type.

local kind = redis.call('type', KEYS[1]).ok
if kind == 'none' then
  return {0, 0, -2}
end
if kind ~= 'hash' then
  return redis.error_reply('WRONGTYPE key ' .. KEYS[1] .. ' holds a ' .. kind)
end
local holds = tonumber(redis.call('hget', KEYS[1], ARGV[1])) or 0
return {1, holds, redis.call('pttl', KEYS[1])}
