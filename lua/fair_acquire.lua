-- Takes a fair lock in arrival order, or one more hold of it (reentrancy). The queue is shared
-- with Java Redisson clients, so its turn timeouts mean what Redisson's do: the time at which a
-- waiter's turn times out, each W (the thread wait time) after the one ahead of it; every grant
-- and every waiter that gives up moves the turns behind it W sooner. A live ferrisson waiter
-- calls again at least every third of the queue timeout: each call sets its deadline in the
-- alive zset (a waiter that stops calling, e.g. a dead process, is dropped once it reaches the
-- head and its deadline has passed) and keeps its turn at least W after the turns of the
-- waiters ahead, from now, so their grants can never make it time out while it waits. Java
-- waiters have no deadline there and are judged by their turn alone. Time is the server's
-- (TIME), never a client clock.
--
-- KEYS[1]  the lock hash (field <owner> -> hold count)
-- KEYS[2]  the queue of waiting owners (redisson_lock_queue:{name})
-- KEYS[3]  turn timeouts, owner -> ms, Redisson's meaning (redisson_lock_timeout:{name})
-- KEYS[4]  the fencing counter of the lock's cluster slot (see lock_acquire.lua)
-- KEYS[5]  ferrisson waiters' deadlines, owner -> server time in ms by which the waiter must
--          call again (ferrisson_fair_alive:{name}); ferrisson's own, Redisson never reads it
-- ARGV[1]  owner
-- ARGV[2]  lease in ms
-- ARGV[3]  queue timeout in ms: how long a waiter keeps its place without calling again
-- ARGV[4]  '1' when the caller waits (joins the queue or refreshes its place), '0' for one try
-- ARGV[5]  the waiters' channel prefix (redisson_lock__channel:{name}); a waiter's is '<prefix>:<owner>'
-- ARGV[6]  '1' when the client knows of no live hold of this owner: a hold the server still has
--          for it is stale and is replaced by a fresh grant (a new token); '2' for an
--          acquisition nested in the owner's hold: one more hold, only while the server still
--          has it (see lock_acquire.lua)
-- ARGV[7]  the thread wait time W in ms (Redisson's threadWaitTime; the same on every client)
-- ARGV[8]  (optional) the waiter has waited long enough to ask whether the holder's process is
--          gone (lua/presence.lua): a hold of a client found gone for its grace is taken over
--          (the lock is then free for the queue's head), and a refusal's ms is at most this
--          many while the holder can be looked at so
--
-- Replies: {1, token} granted anew (the slot counter after its INCR); {2, 0} one more hold;
-- {0, ms} not granted: ms is the holder's remaining lease, or, when the lock is free but another
-- waiter is first, how long that waiter keeps its turn (-1: no TTL); {4, 0} (ARGV[6] = '2' only)
-- the owner holds nothing here, so the hold the acquisition nests in is gone (nothing written).
-- Errors: WRONGTYPE when a key holds another type; nothing is written then. A refused command
-- (an ACL user's) fails with Redis' own error.

if redis.replicate_commands then
  redis.replicate_commands()
end
for _, key in ipairs({{1, 'hash'}, {2, 'list'}, {3, 'zset'}, {5, 'zset'}}) do
  local kind = redis.call('type', KEYS[key[1]]).ok
  if kind ~= 'none' and kind ~= key[2] then
    return redis.error_reply('WRONGTYPE key ' .. KEYS[key[1]] .. ' holds a ' .. kind)
  end
end
local counter = redis.pcall('get', KEYS[4])
if type(counter) == 'table' and not string.find(counter.err, 'WRONGTYPE', 1, true) then
  -- Not the key's type (a refused GET, say): Redis' own error.
  return redis.error_reply(counter.err)
end
if type(counter) == 'table' or (counter and not (string.match(counter, '^%-?%d+$')
    and tonumber(counter) <= 9007199254740990)) then
  return redis.error_reply('WRONGTYPE key ' .. KEYS[4] .. ' holds no counter')
end
-- A new grant's token: the server's clock in microseconds, or the counter + 1 when the counter
-- is ahead of it; the counter ends at the token (see lock_acquire.lua).
local function new_token()
  local now = redis.call('time')
  local token = tonumber(now[1] .. string.format('%06d', now[2]))
  if counter and tonumber(counter) >= token then
    token = tonumber(counter) + 1
  end
  redis.call('set', KEYS[4], string.format('%d', token))
  return token
end

if ARGV[6] == '2' and redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  return {4, 0}
end

local time = redis.call('time')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local owner = ARGV[1]
local timeout, wait = tonumber(ARGV[3]), tonumber(ARGV[7])

-- How long the waiter `who` keeps its turn from now (<= 0: it is over).
local function turn_left(who)
  local turn = tonumber(redis.call('zscore', KEYS[3], who))
  if not turn then
    return 0
  end
  local left = turn - now
  local deadline = tonumber(redis.call('zscore', KEYS[5], who))
  if deadline and deadline - now < left then
    left = deadline - now
  end
  return left
end

-- With nobody queued, what others' sweeps left (Redisson's never touch the alive zset) goes.
local function tidy()
  if redis.call('llen', KEYS[2]) == 0 then
    redis.call('del', KEYS[3], KEYS[5])
  end
end

-- Waiters whose turn timed out or who stopped calling leave, from the head on.
local swept = false
while true do
  local head = redis.call('lindex', KEYS[2], 0)
  if not head or turn_left(head) > 0 then
    break
  end
  redis.call('lpop', KEYS[2])
  redis.call('zrem', KEYS[3], head)
  redis.call('zrem', KEYS[5], head)
  swept = true
end
tidy()

local function keep_place()
  if ARGV[4] ~= '1' then
    return
  end
  local queue = redis.call('lrange', KEYS[2], 0, -1)
  local at, turn
  for i, queued in ipairs(queue) do
    if queued == owner then
      at = i
      turn = tonumber(redis.call('zscore', KEYS[3], owner))
      break
    end
  end
  if not at then
    -- Joins at the tail with Redisson's turn: W after the tail's, or after the holder's lease.
    local tail = queue[#queue]
    local after = tail and tonumber(redis.call('zscore', KEYS[3], tail))
    if not after then
      after = now + math.max(redis.call('pttl', KEYS[1]), 0)
    end
    turn = after + wait
    redis.call('rpush', KEYS[2], owner)
    at = #queue + 1
    queue[at] = owner
  end
  -- Never lowered, but at least W after the turns of the (at - 1) waiters ahead, from now.
  turn = math.max(turn or 0, now + at * wait)
  redis.call('zadd', KEYS[3], turn, owner)
  -- The turns behind stay at least W apart, as Redisson's are.
  for i = at + 1, #queue do
    local behind = tonumber(redis.call('zscore', KEYS[3], queue[i]))
    if behind then
      if behind < turn + wait then
        behind = turn + wait
        redis.call('zadd', KEYS[3], behind, queue[i])
      end
      turn = behind
    end
  end
  redis.call('zadd', KEYS[5], now + timeout, owner)
  -- The deadlines outlive every turn in the queue, so a ferrisson waiter is never judged as a
  -- Java one (by its turn alone) while its turn lasts.
  local last = redis.call('zrange', KEYS[3], -1, -1, 'withscores')
  local keep = math.max(2 * timeout, (tonumber(last[2]) or now) - now + timeout)
  if redis.call('pttl', KEYS[5]) < keep then
    redis.call('pexpire', KEYS[5], math.floor(keep))
  end
end

if redis.call('exists', KEYS[1]) == 1 then
  if redis.call('hexists', KEYS[1], owner) == 1 then
    if ARGV[6] == '1' then
      local token = new_token()
      redis.call('hset', KEYS[1], owner, 1)
      redis.call('pexpire', KEYS[1], ARGV[2])
      return {1, token}
    end
    redis.call('hincrby', KEYS[1], owner, 1)
    redis.call('pexpire', KEYS[1], ARGV[2])
    return {2, 0}
  end
  local pttl = redis.call('pttl', KEYS[1])
  -- The hash has one field, its holder (a hash of more is another kind's: left alone).
  local fields = ARGV[8] and redis.call('hkeys', KEYS[1])
  local gone = fields and #fields == 1 and holder_gone(fields[1], tonumber(ARGV[8]), owner)
  if gone ~= 0 then
    if gone and (pttl == -1 or gone < pttl) then
      pttl = gone
    end
    keep_place()
    return {0, pttl}
  end
  -- The holder's process is gone: the lock is free for the queue's head, told so below.
  redis.call('del', KEYS[1])
  swept = true
end

local head = redis.call('lindex', KEYS[2], 0)
if head and head ~= owner then
  if swept then
    -- The sweep made it first at a free lock: it may be asleep until the old head's turn ends.
    redis.call('publish', ARGV[5] .. ':' .. head, '0')
  end
  keep_place()
  return {0, math.floor(turn_left(head))}
end
local token = new_token()
if head then
  redis.call('lpop', KEYS[2])
end
redis.call('zrem', KEYS[3], owner)
redis.call('zrem', KEYS[5], owner)
-- Every waiter left gets its turn W sooner, as at a Redisson grant.
for _, queued in ipairs(redis.call('zrange', KEYS[3], 0, -1)) do
  redis.call('zincrby', KEYS[3], -wait, queued)
end
tidy()
redis.call('hset', KEYS[1], owner, 1)
redis.call('pexpire', KEYS[1], ARGV[2])
return {1, token}
