-- Takes a waiter out of a fair lock's queue (its wait was cancelled or ran out), and, when that
-- makes another waiter first at a free lock, tells that one.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the queue of waiting owners
-- KEYS[3]  waiter deadlines
-- ARGV[1]  owner
-- ARGV[2]  the waiters' channel prefix
--
-- Reply: 1 when the owner was queued, 0 otherwise.

if redis.call('type', KEYS[2]).ok ~= 'list' or redis.call('type', KEYS[3]).ok ~= 'zset' then
  return 0
end
local was_head = redis.call('lindex', KEYS[2], 0) == ARGV[1]
local removed = redis.call('lrem', KEYS[2], 0, ARGV[1])
redis.call('zrem', KEYS[3], ARGV[1])
if was_head and redis.call('exists', KEYS[1]) == 0 then
  local head = redis.call('lindex', KEYS[2], 0)
  if head then
    redis.call('publish', ARGV[2] .. ':' .. head, '0')
  end
end
if removed > 0 then
  return 1
end
return 0
