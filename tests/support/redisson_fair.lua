-- TEST FIXTURE, NOT REDISSON'S CODE. An emulation of what a Java Redisson 3.x client does to a fair
-- lock (RFairLock), written for ferrisson's tests from a description of Redisson's behaviour: it
-- lets a test play a Java client in a queue shared with ferrisson waiters. Like Redisson, it
-- takes the time from the caller (Java passes System.currentTimeMillis()), never from Redis.
--
-- Scores in the timeout zset follow Redisson's meaning: the time at which a waiter's turn times
-- out, cumulative along the queue (each waiter gets the thread wait time W after the one ahead).
--
-- KEYS[1]  the lock hash (field <owner> -> hold count)
-- KEYS[2]  the queue of waiting owners (redisson_lock_queue:{name})
-- KEYS[3]  the turn timeouts, owner -> ms (redisson_lock_timeout:{name})
-- ARGV[1]  the operation:
--          'acquire'  a tryLock/lock attempt that waits when refused (joins the queue)
--          'try'      tryLock() without waiting (never joins the queue)
--          'release'  unlock()
--          'give_up'  a waiter that stops waiting (its wait timed out, or it was interrupted)
-- ARGV[2]  owner ('<uuid>:<threadId>')
-- ARGV[3]  lease in ms
-- ARGV[4]  thread wait time W in ms (Redisson's default: 300000)
-- ARGV[5]  the Java client's clock, ms
-- ARGV[6]  the waiters' channel prefix (redisson_lock__channel:{name}); a waiter's is
--          '<prefix>:<owner>'
--
-- Replies: 'acquire': nil granted, else how long to wait in ms (for a waiter already queued: until
-- the turn of the one ahead times out). 'try': nil granted, else the lock's PTTL. 'release': 1
-- released (or the lock was free), 0 holds remain, nil the owner held nothing. 'give_up': 1.

local op, owner = ARGV[1], ARGV[2]
local lease, wait, now = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])

local function tell_head()
  local head = redis.call('lindex', KEYS[2], 0)
  if head then
    redis.call('publish', ARGV[6] .. ':' .. head, '0')
  end
end

-- Every operation first drops the waiters whose turn timed out, from the head on.
while true do
  local head = redis.call('lindex', KEYS[2], 0)
  if not head then
    break
  end
  local score = tonumber(redis.call('zscore', KEYS[3], head))
  if score and score > now then
    break
  end
  redis.call('lpop', KEYS[2])
  redis.call('zrem', KEYS[3], head)
end

if op == 'acquire' or op == 'try' then
  local head = redis.call('lindex', KEYS[2], 0)
  if redis.call('exists', KEYS[1]) == 0 and (not head or head == owner) then
    redis.call('lpop', KEYS[2])
    redis.call('zrem', KEYS[3], owner)
    -- Every waiter left gets its turn W earlier.
    for _, other in ipairs(redis.call('zrange', KEYS[3], 0, -1)) do
      redis.call('zincrby', KEYS[3], -wait, other)
    end
    redis.call('hset', KEYS[1], owner, 1)
    redis.call('pexpire', KEYS[1], lease)
    return nil
  end
  if redis.call('hexists', KEYS[1], owner) == 1 then
    redis.call('hincrby', KEYS[1], owner, 1)
    redis.call('pexpire', KEYS[1], lease)
    return nil
  end
  if op == 'try' then
    return redis.call('pttl', KEYS[1])
  end
  local mine = tonumber(redis.call('zscore', KEYS[3], owner))
  if mine then
    return mine - wait - now
  end
  local tail = redis.call('lindex', KEYS[2], -1)
  local tail_score = tail and tail ~= owner and tonumber(redis.call('zscore', KEYS[3], tail))
  local ttl
  if tail_score then
    ttl = tail_score - now
  else
    ttl = redis.call('pttl', KEYS[1])
  end
  redis.call('zadd', KEYS[3], now + ttl + wait, owner)
  redis.call('rpush', KEYS[2], owner)
  return ttl
end

if op == 'release' then
  if redis.call('exists', KEYS[1]) == 0 then
    tell_head()
    return 1
  end
  if redis.call('hexists', KEYS[1], owner) == 0 then
    return nil
  end
  if redis.call('hincrby', KEYS[1], owner, -1) > 0 then
    redis.call('pexpire', KEYS[1], lease)
    return 0
  end
  redis.call('del', KEYS[1])
  tell_head()
  return 1
end

if op == 'give_up' then
  local queued = redis.call('lrange', KEYS[2], 0, -1)
  local behind = false
  for _, other in ipairs(queued) do
    if behind then
      redis.call('zincrby', KEYS[3], -wait, other)
    elseif other == owner then
      behind = true
    end
  end
  redis.call('lrem', KEYS[2], 0, owner)
  redis.call('zrem', KEYS[3], owner)
  return 1
end

return redis.error_reply('unknown operation ' .. tostring(op))
