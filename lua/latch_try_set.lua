-- Sets a count-down latch's count, only when the latch is not set already (Redisson's
-- trySetCount), and tells its waiters of the new count.
--
-- KEYS[1]  the latch: a string count
-- KEYS[2]  its channel (redisson_countdownlatch__channel__{name})
-- ARGV[1]  the count (a positive integer)
-- ARGV[2]  the message for a new count ('1')
--
-- Replies: 1 when the count was set, 0 when the latch was already set (nothing changed).

if redis.call('exists', KEYS[1]) == 1 then
  return 0
end
redis.call('set', KEYS[1], ARGV[1])
redis.call('publish', KEYS[2], ARGV[2])
return 1
