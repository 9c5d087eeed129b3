-- Frees a lock whoever holds it, and wakes its waiters.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the lock's channel
-- ARGV[1]  the message published when a held lock was freed ('0')
--
-- Reply: 1 when a held lock was deleted, 0 when it was free.
-- Errors: WRONGTYPE when the key holds another type (nothing changed).

local kind = redis.call('type', KEYS[1]).ok
if kind == 'none' then
  return 0
end
if kind ~= 'hash' then
  return redis.error_reply('WRONGTYPE key ' .. KEYS[1] .. ' holds a ' .. kind)
end
redis.call('del', KEYS[1])
redis.call('publish', KEYS[2], ARGV[1])
return 1
