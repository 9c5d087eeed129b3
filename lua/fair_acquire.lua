-- Takes a fair lock in arrival order, or one more hold of it (reentrancy). Waiters queue in a
-- list; each keeps its place by calling again before its deadline in the zset passes (a waiter
-- that stops calling, e.g. a dead process, is dropped once it reaches the head). Time is the
-- server's (TIME), never a client clock.
--
-- KEYS[1]  the lock hash (field <owner> -> hold count)
-- KEYS[2]  the queue of waiting owners (redisson_lock_queue:{name})
-- KEYS[3]  waiter deadlines, owner -> server time in ms (redisson_lock_timeout:{name})
-- KEYS[4]  the fencing counter of the lock's cluster slot (see lock_acquire.lua)
-- ARGV[1]  owner
-- ARGV[2]  lease in ms
-- ARGV[3]  queue timeout in ms: how long a waiter keeps its place without calling again
-- ARGV[4]  '1' when the caller waits (joins the queue or refreshes its place), '0' for one try
-- ARGV[5]  the waiters' channel prefix (redisson_lock__channel:{name}); a waiter's is '<prefix>:<owner>'
-- ARGV[6]  '1' when the client knows of no live hold of this owner: a hold the server still has
--          for it is stale and is replaced by a fresh grant (a new token)
--
-- Replies: {1, token} granted anew (the slot counter after its INCR); {2, 0} one more hold;
-- {0, ms} not granted: ms is the holder's remaining lease, or, when the lock is free but another
-- waiter is first, how long that waiter keeps its turn (-1: no TTL).
-- Errors: WRONGTYPE when a key holds another type; nothing is written then.

if redis.replicate_commands then
  redis.replicate_commands()
end
for i, want in ipairs({'hash', 'list', 'zset'}) do
  local kind = redis.call('type', KEYS[i]).ok
  if kind ~= 'none' and kind ~= want then
    return redis.error_reply('WRONGTYPE key ' .. KEYS[i] .. ' holds a ' .. kind)
  end
end
local counter = redis.pcall('get', KEYS[4])
if type(counter) == 'table' or (counter and not tonumber(counter)) then
  return redis.error_reply('WRONGTYPE key ' .. KEYS[4] .. ' holds no counter')
end

local time = redis.call('time')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local owner = ARGV[1]

-- Waiters that stopped keeping their place leave from the head on.
while true do
  local head = redis.call('lindex', KEYS[2], 0)
  if not head then
    break
  end
  local deadline = tonumber(redis.call('zscore', KEYS[3], head))
  if deadline and deadline > now then
    break
  end
  redis.call('lpop', KEYS[2])
  redis.call('zrem', KEYS[3], head)
end

local function keep_place()
  if ARGV[4] ~= '1' then
    return
  end
  if not redis.call('zscore', KEYS[3], owner) then
    redis.call('rpush', KEYS[2], owner)
  end
  redis.call('zadd', KEYS[3], now + tonumber(ARGV[3]), owner)
end

if redis.call('exists', KEYS[1]) == 1 then
  if redis.call('hexists', KEYS[1], owner) == 1 then
    if ARGV[6] == '1' then
      local token = redis.call('incr', KEYS[4])
      redis.call('hset', KEYS[1], owner, 1)
      redis.call('pexpire', KEYS[1], ARGV[2])
      return {1, token}
    end
    redis.call('hincrby', KEYS[1], owner, 1)
    redis.call('pexpire', KEYS[1], ARGV[2])
    return {2, 0}
  end
  keep_place()
  return {0, redis.call('pttl', KEYS[1])}
end

local head = redis.call('lindex', KEYS[2], 0)
if head and head ~= owner then
  keep_place()
  return {0, tonumber(redis.call('zscore', KEYS[3], head)) - now}
end
local token = redis.call('incr', KEYS[4])
if head then
  redis.call('lpop', KEYS[2])
  redis.call('zrem', KEYS[3], owner)
end
redis.call('hset', KEYS[1], owner, 1)
redis.call('pexpire', KEYS[1], ARGV[2])
return {1, token}
