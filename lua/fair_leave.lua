-- Takes a waiter out of a fair lock's queue (its wait was cancelled or ran out), as a Redisson
-- waiter that gives up leaves: the turns of the waiters behind it come W sooner. When that makes
-- another waiter first at a free lock, tells that one.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the queue of waiting owners
-- KEYS[3]  turn timeouts (owner -> ms, Redisson's meaning)
-- KEYS[4]  ferrisson waiters' deadlines (owner -> server time in ms)
-- ARGV[1]  owner
-- ARGV[2]  the waiters' channel prefix
-- ARGV[3]  the thread wait time W in ms
--
-- Reply: 1 when the owner was queued, 0 otherwise (also when a key holds another type: nothing
-- is changed then).

if redis.call('type', KEYS[2]).ok ~= 'list' then
  -- Not queued; a deadline of its own, if any, goes.
  if redis.call('type', KEYS[4]).ok == 'zset' then
    redis.call('zrem', KEYS[4], ARGV[1])
  end
  return 0
end
for _, key in ipairs({KEYS[3], KEYS[4]}) do
  local kind = redis.call('type', key).ok
  if kind ~= 'zset' and kind ~= 'none' then
    return 0
  end
end
local queue = redis.call('lrange', KEYS[2], 0, -1)
local at
for i, queued in ipairs(queue) do
  if queued == ARGV[1] then
    at = i
    break
  end
end
if at then
  for i = at + 1, #queue do
    if redis.call('zscore', KEYS[3], queue[i]) then
      redis.call('zincrby', KEYS[3], -tonumber(ARGV[3]), queue[i])
    end
  end
  redis.call('lrem', KEYS[2], 0, ARGV[1])
end
redis.call('zrem', KEYS[3], ARGV[1])
redis.call('zrem', KEYS[4], ARGV[1])
local head = redis.call('lindex', KEYS[2], 0)
if at == 1 and head and redis.call('exists', KEYS[1]) == 0 then
  redis.call('publish', ARGV[2] .. ':' .. head, '0')
end
if not head then
  -- Nobody is queued any more: what others' sweeps left goes too.
  redis.call('del', KEYS[3], KEYS[4])
end
if at then
  return 1
end
return 0
