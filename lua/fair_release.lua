-- Gives back one hold of a fair lock. The last one frees it and wakes the first live waiter on
-- its own channel: waiters whose turn timed out (Redisson's rule, see fair_acquire.lua) or, for
-- ferrisson waiters, who stopped calling leave the queue first. Safe to resend, as
-- lock_release.lua: a partial release keeps its reply in a latch, and a resend that finds no
-- hold answers 2.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the queue of waiting owners
-- KEYS[3]  turn timeouts (owner -> ms, Redisson's meaning)
-- KEYS[4]  the latch of this request
-- KEYS[5]  ferrisson waiters' deadlines (owner -> server time in ms)
-- ARGV[1]  owner
-- ARGV[2]  lease in ms: the TTL the lock gets back while holds remain
-- ARGV[3]  latch TTL in ms
-- ARGV[4]  the waiters' channel prefix; the head waiter is told on '<prefix>:<owner>'
-- ARGV[5]  '1' when this request is a resend, else '0'
--
-- Replies: 1 released (lock deleted, head waiter told), 0 still held (reentrant holds remain),
-- nil when the owner holds no hold (nothing changed), 2 (resends only) no hold and no partial
-- release by this request recorded.
-- Errors: WRONGTYPE when a key holds another type (nothing changed).

if redis.replicate_commands then
  redis.replicate_commands()
end
-- Types first: an error after the lock is deleted would leave the head waiter untold.
for _, key in ipairs({{2, 'list'}, {3, 'zset'}, {5, 'zset'}}) do
  local kind = redis.call('type', KEYS[key[1]]).ok
  if kind ~= 'none' and kind ~= key[2] then
    return redis.error_reply('WRONGTYPE key ' .. KEYS[key[1]] .. ' holds a ' .. kind)
  end
end
if ARGV[5] == '1' then
  local done = redis.call('get', KEYS[4])
  if done then
    return tonumber(done)
  end
end
local holds = tonumber(redis.call('hget', KEYS[1], ARGV[1]))
if not holds then
  if ARGV[5] == '1' then
    return 2
  end
  return nil
end

local reply = 0
if holds > 1 then
  redis.call('hset', KEYS[1], ARGV[1], holds - 1)
  redis.call('pexpire', KEYS[1], ARGV[2])
  redis.call('set', KEYS[4], 0, 'px', ARGV[3])
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
    local turn = tonumber(redis.call('zscore', KEYS[3], head))
    local deadline = tonumber(redis.call('zscore', KEYS[5], head))
    if turn and turn > now and (not deadline or deadline > now) then
      redis.call('publish', ARGV[4] .. ':' .. head, '0')
      break
    end
    redis.call('lpop', KEYS[2])
    redis.call('zrem', KEYS[3], head)
    redis.call('zrem', KEYS[5], head)
  end
  if redis.call('llen', KEYS[2]) == 0 then
    -- With nobody queued, what others' sweeps left (Redisson's never touch the deadlines) goes.
    for _, key in ipairs({KEYS[3], KEYS[5]}) do
      if redis.call('type', key).ok == 'zset' then
        redis.call('del', key)
      end
    end
  end
end
return reply
