-- Gives back an RLock owner's last hold and, in the same step, grants the lock to a waiter of
-- the same client, so the lock is never free in between and the waiter needs no round trip of
-- its own. The handover happens only when nobody else waits: when the lock's channel has more
-- subscribers than the releasing client's own, the lock is freed and the unlock published as a
-- plain release would, so waiters of other clients (Java Redisson's included) keep their chance.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the lock's channel (redisson_lock__channel:{name})
-- KEYS[3]  the fencing counter of the lock's cluster slot (see lock_acquire.lua)
-- KEYS[4]  the lock's starving waiters (see lock_acquire.lua)
-- KEYS[5]  (fenced locks only) Redisson's counter of the lock name
-- ARGV[1]  owner giving the hold back
-- ARGV[2]  the waiter the lock is handed to
-- ARGV[3]  the waiter's lease in ms
-- ARGV[4]  how many of the channel's subscribers are the releasing client's own (0 or 1)
-- ARGV[5]  '1' when this request is a resend, else '0'
-- ARGV[6]  the lease in ms of a hold handed to a starving waiter
-- ARGV[7]  '1' when the waiter has said it starves (it leaves the starving set when handed)
--
-- Freeing the lock (others wait) is lock_release.lua's last-hold release: the lock goes to the
-- first starving waiter if there is one, else it is deleted (with the first go to waiters that
-- are not ferrisson clients); '0' is published.
--
-- Clock: server_time() is TIME, defined by lua/clock.lua, which runs before this script, or
-- by the list form's head (lua/list_head.lua), which reads it once for a whole list.
--
-- Replies: one integer. A {status, value} table costs Redis about 0.4 µs more a call than an
-- integer (as for lock_acquire.lua), and a token is never below 1, so the statuses take the
-- integers below it:
--   token >= 1  handed over: the owner's hold is gone and the waiter holds the lock once, with
--               its lease; token is the waiter's fencing token, a new one as lock_acquire.lua
--               hands out
--   0           freed and published (others wait)
--   -1          the owner holds nothing: nothing changed
--   -2          (resends only) the owner holds nothing and the waiter was not handed the lock:
--               the first send freed it, or the hold was gone before
--   -3          the owner has several holds on the server: nothing changed
-- A resend that finds the waiter holding answers a token again, the slot counter's value now
-- (for a fenced lock the larger of both counters, the name's counter raised to it): at least
-- the waiter's real token and no more than the counters, so the name's later grants, Java's
-- fenced ones included, still go above it. Only the releasing client grants to its waiters,
-- and it does not grant to one whose handover is in doubt.
-- Errors: WRONGTYPE when a key holds another type; ERR when the token would be below 1 (a
-- counter set or deleted by hand), as such a token could not be told from the statuses. A
-- first send never changes the lock then (the INCR is the first write; the counters may have
-- moved up, which costs no guarantee); a resend errs so when its first send handed over, and
-- the client then takes the waiter's hold back as for any failed handover.

local holds = tonumber(redis.call('hget', KEYS[1], ARGV[1]))
if not holds then
  if ARGV[5] == '1' then
    if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
      local token = tonumber(redis.call('get', KEYS[3])) or 0
      if KEYS[5] then
        -- A fenced lock's name counter must not stay below a token handed out for the name.
        local named = tonumber(redis.call('get', KEYS[5])) or 0
        if named > token then
          token = named
        elseif token > named then
          redis.call('set', KEYS[5], token)
        end
      end
      if token < 1 then
        return redis.error_reply('ERR fencing counter ' .. KEYS[3] .. ' at ' .. token
          .. ': no token below 1 is answered')
      end
      return token
    end
    return -2
  end
  return -1
end
if holds > 1 then
  return -3
end

local subscribers = redis.call('pubsub', 'numsub', KEYS[2], KEYS[2] .. ':ferrisson')
if subscribers[2] - tonumber(ARGV[4]) > 0 then
  -- Others wait: who gets the lock, as in lock_release.lua (other libraries' waiters and
  -- starving waiters take turns; dead entries are dropped). Should the waiter picked for this
  -- handover come up as the starving waiter to serve, it is handed over below as when nobody
  -- else waits: a hold whose token the client learns, never a handed (provisional) one, which a
  -- resend could not tell from that handover.
  local foreign = subscribers[2] > subscribers[4]
  local owed = foreign and redis.pcall('zscore', KEYS[4], '!')
  local handed, picked
  if owed and type(owed) ~= 'table' then
    redis.call('zrem', KEYS[4], '!')
  else
    for _ = 1, 8 do
      local entry = redis.pcall('zpopmin', KEYS[4])
      if not entry[1] then
        break
      end
      if entry[1] == ARGV[2] then
        picked = true
        break
      end
      if entry[1] ~= ARGV[1] and entry[1] ~= '!'
          and redis.call('pubsub', 'numsub', KEYS[2] .. ':' .. entry[1])[2] > 0 then
        handed = entry[1]
        break
      end
    end
  end
  if picked then
    if foreign then
      redis.call('zadd', KEYS[4], 'inf', '!')
      redis.call('pexpire', KEYS[4], 60000)
    end
  else
    redis.call('del', KEYS[1])
    if handed then
      redis.call('hset', KEYS[1], handed, 1)
      redis.call('pexpire', KEYS[1], ARGV[6])
      redis.call('publish', KEYS[2] .. ':' .. handed, '0')
      if foreign then
        redis.call('zadd', KEYS[4], 'inf', '!')
        redis.call('pexpire', KEYS[4], 60000)
      end
    elseif foreign then
      -- Here the count is known before the unlock message, which follows this one.
      redis.call('publish', KEYS[2] .. ':ferrisson', '0')
    end
    redis.call('publish', KEYS[2], '0')
    return 0
  end
end

local function counter_error(key, err)
  if string.find(err, 'WRONGTYPE', 1, true) or string.find(err, 'not an integer', 1, true) then
    return redis.error_reply('WRONGTYPE key ' .. key .. ' holds no counter')
  end
  return redis.error_reply(err)
end
-- The waiter's token, as lock_acquire.lua makes one: the server's clock in microseconds, or a
-- counter + 1 when a counter is ahead of it; the counters end at the token.
-- Redis before 7 replicates a script by its commands only when asked, before any write.
if redis.replicate_commands then
  redis.replicate_commands()
end
local now = server_time()
local clock = now[1] .. string.format('%06d', now[2])
local seen = redis.pcall('set', KEYS[3], clock, 'get')
if type(seen) == 'table' then
  return counter_error(KEYS[3], seen.err)
end
local token = tonumber(clock)
if seen then
  local last = string.match(seen, '^%-?%d+$') and tonumber(seen)
  if not last or last > 9007199254740990 then
    redis.call('set', KEYS[3], seen)
    return counter_error(KEYS[3], 'not an integer')
  end
  if last >= token then
    token = last + 1
    redis.call('set', KEYS[3], string.format('%d', token))
  end
end
if KEYS[5] then
  local named = redis.pcall('get', KEYS[5])
  if type(named) == 'table'
      or (named and not (string.match(named, '^%-?%d+$') and tonumber(named) <= 9007199254740990)) then
    return counter_error(KEYS[5], 'not an integer')
  end
  if named and tonumber(named) >= token then
    token = tonumber(named) + 1
    redis.call('set', KEYS[3], string.format('%d', token))
  end
  redis.call('set', KEYS[5], string.format('%d', token))
end
if ARGV[7] == '1' then
  -- Starving (maybe the first of the set, handed over here instead of by the set).
  redis.pcall('zrem', KEYS[4], ARGV[2])
end
redis.call('hdel', KEYS[1], ARGV[1])
redis.call('hset', KEYS[1], ARGV[2], 1)
redis.call('pexpire', KEYS[1], ARGV[3])
return token
