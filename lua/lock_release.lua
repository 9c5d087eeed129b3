-- Gives back one hold of an RLock. Safe to resend: the first run leaves its reply in a
-- short-lived latch keyed by the request id, and a resent request is answered from it.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the lock's channel (redisson_lock__channel:{name})
-- KEYS[3]  the latch of this request (redisson_unlock_latch:{name}:<request-id>)
-- ARGV[1]  owner
-- ARGV[2]  lease in ms: the TTL the lock gets back while holds remain
-- ARGV[3]  latch TTL in ms
-- ARGV[4]  the message published when the lock becomes free ('0')
--
-- Replies: 1 released (lock deleted, message published), 0 still held (reentrant holds
-- remain), nil when the owner holds no hold (nothing changed).
-- Errors: WRONGTYPE when the lock key holds another type (nothing changed).

local done = redis.call('get', KEYS[3])
if done then
  return tonumber(done)
end

local kind = redis.call('type', KEYS[1]).ok
if kind ~= 'none' and kind ~= 'hash' then
  return redis.error_reply('WRONGTYPE key ' .. KEYS[1] .. ' holds a ' .. kind)
end
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  return nil
end

local reply = 0
if redis.call('hincrby', KEYS[1], ARGV[1], -1) > 0 then
  redis.call('pexpire', KEYS[1], ARGV[2])
else
  redis.call('del', KEYS[1])
  redis.call('publish', KEYS[2], ARGV[4])
  reply = 1
end
redis.call('set', KEYS[3], reply, 'px', ARGV[3])
return reply
