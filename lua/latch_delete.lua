-- Deletes a count-down latch, opening it: its waiters are told, as when it reaches zero.
--
-- KEYS[1]  the latch: a string count
-- KEYS[2]  its channel (redisson_countdownlatch__channel__{name})
-- ARGV[1]  the message for "opened" ('0')
--
-- Replies: 1 when a latch was deleted, 0 when there was none.

if redis.call('del', KEYS[1]) == 1 then
  redis.call('publish', KEYS[2], ARGV[1])
  return 1
end
return 0
