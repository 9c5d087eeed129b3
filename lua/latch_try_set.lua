-- Sets a count-down latch's count, only when the latch is not set already (Redisson's
-- trySetCount), and tells its waiters of the new count.
--
-- KEYS[1]  the latch: a string count
-- KEYS[2]  its channel (redisson_countdownlatch__channel__{name})
-- ARGV[1]  the count (0 or a positive integer)
-- ARGV[2]  the message for a new count ('1')
--
-- A latch is set while its key holds a count above zero, or anything that is not a count. A key
-- holding 0 or less is an open latch (Redisson's trySetCount(0) leaves "0"): it is replaced.
-- A count of 0 sets an open latch, which has no key: nothing is written and nobody is told
-- (nobody waits on an open latch), and a "0" left by Redisson goes.
--
-- Replies: 1 when the count was set, 0 when the latch was already set (nothing changed).

local kind = redis.call('type', KEYS[1])['ok']
if kind == 'string' then
  local count = tonumber(redis.call('get', KEYS[1]))
  if not count or count > 0 then
    return 0
  end
elseif kind ~= 'none' then
  return 0
end
if ARGV[1] == '0' then
  if kind == 'string' then
    redis.call('del', KEYS[1])
  end
  return 1
end
redis.call('set', KEYS[1], ARGV[1])
redis.call('publish', KEYS[2], ARGV[2])
return 1
