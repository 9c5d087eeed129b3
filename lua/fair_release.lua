-- Gives back one hold of a fair lock. The last one frees it and wakes the first live waiter on
-- its own channel. Safe to resend: the reply is kept in a latch keyed by the request id.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the queue of waiting owners
-- KEYS[3]  waiter deadlines (owner -> server time in ms)
-- KEYS[4]  the latch of this request
-- ARGV[1]  owner
-- ARGV[2]  lease in ms: the TTL the lock gets back while holds remain
-- ARGV[3]  latch TTL in ms
-- ARGV[4]  the waiters' channel prefix; the head waiter is told on '<prefix>:<owner>'
--
-- Replies: 1 released (lock deleted, head waiter told), 0 still held (reentrant holds remain),
-- nil when the owner holds no hold (nothing changed).
-- Errors: WRONGTYPE when the lock key holds another type (nothing changed).

if redis.replicate_commands then
  redis.replicate_commands()
end
local done = redis.call('get', KEYS[4])
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
  reply = 1
  redis.call('del', KEYS[1])
  local time = redis.call('time')
  local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  while true do
    local head = redis.call('lindex', KEYS[2], 0)
    if not head then
      break
    end
    local deadline = tonumber(redis.call('zscore', KEYS[3], head))
    if deadline and deadline > now then
      redis.call('publish', ARGV[4] .. ':' .. head, '0')
      break
    end
    redis.call('lpop', KEYS[2])
    redis.call('zrem', KEYS[3], head)
  end
end
redis.call('set', KEYS[4], reply, 'px', ARGV[3])
return reply
