-- Takes a waiting writer's mark away (writer preference): its wait was cancelled, ran out or
-- failed. When that leaves no live mark and no writer holds the lock, readers that the mark held
-- back may enter now: they are woken with '1', the message every waiter (Java Redisson's too)
-- reads as "a write hold ended, everybody try again"; a Java waiter just tries once more.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the waiting writers' marks ({name}:ferrisson_writers; owner -> server time in ms)
-- KEYS[3]  the lock's channel (redisson_rwlock:{name})
-- ARGV[1]  owner
--
-- Reply: 1 when the owner's mark was there and went, 0 otherwise (also when a key holds another
-- type: nothing is changed then).

if redis.replicate_commands then
  redis.replicate_commands()
end
if redis.call('type', KEYS[2]).ok ~= 'zset' then
  return 0
end
if redis.call('zrem', KEYS[2], ARGV[1]) == 0 then
  return 0
end
local time = redis.call('time')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
if redis.call('zcount', KEYS[2], '(' .. now, '+inf') > 0 then
  return 1
end
local kind = redis.call('type', KEYS[1]).ok
if kind == 'none' or (kind == 'hash' and redis.call('hget', KEYS[1], 'mode') == 'read') then
  redis.call('publish', KEYS[3], '1')
end
return 1
