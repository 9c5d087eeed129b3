-- Counts a count-down latch down by one. At zero the latch is deleted and its waiters are told
-- (Redisson's countDown: a count already at zero, or a latch never set, stays deleted and tells
-- nobody again).
--
-- KEYS[1]  the latch: a string count
-- KEYS[2]  its channel (redisson_countdownlatch__channel__{name})
-- ARGV[1]  the message for "opened" ('0')
--
-- Replies: the count left (0 when the latch is open).
-- Errors: WRONGTYPE when the key holds something else than a count (nothing changed).

local left = redis.pcall('decr', KEYS[1])
if type(left) == 'table' then
  if string.find(left.err, 'WRONGTYPE', 1, true) or string.find(left.err, 'not an integer', 1, true) then
    return redis.error_reply('WRONGTYPE key ' .. KEYS[1] .. ' holds no count')
  end
  return redis.error_reply(left.err)
end
if left <= 0 then
  redis.call('del', KEYS[1])
end
if left == 0 then
  redis.call('publish', KEYS[2], ARGV[1])
end
if left < 0 then
  return 0
end
return left
