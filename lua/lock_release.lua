-- Gives back one hold of an RLock. Safe to resend: a partial release leaves its reply in a
-- short-lived latch keyed by the request id, and a resend is answered from it; a resend that
-- finds no hold says so (2) instead of "not the owner", since the first send may have released
-- the last hold. The common case, the last hold going, writes no latch.
--
-- Two forms, told apart by the number of KEYS:
--
-- Full form (4 KEYS, 5 ARGV), any release:
-- KEYS[1]  the lock hash
-- KEYS[2]  the lock's channel (redisson_lock__channel:{name})
-- KEYS[3]  the lock's starving waiters (ferrisson_lock_starving:{name}, see lock_acquire.lua)
-- KEYS[4]  the latch of this request (redisson_unlock_latch:{name}:<request-id>)
-- ARGV[1]  owner
-- ARGV[2]  lease in ms: the TTL the lock gets back while holds remain
-- ARGV[3]  latch TTL in ms
-- ARGV[4]  '1' when this request is a resend, else '0'
-- ARGV[5]  the lease in ms of a hold handed to a starving waiter
--
-- Short form (KEYS[1] to KEYS[3] as above; ARGV[1] owner, ARGV[2] the handed lease), for a
-- first send the client believes gives back the owner's last hold. It never decrements, so it
-- needs neither a latch nor a lease (each key or argument costs Redis a little on every call):
-- when the owner has several holds it changes nothing and replies 3, and the client then
-- removes them all. A short send is never resent as such: resends use the full form, whose
-- latch this form never writes.
--
-- The last hold going: the lock is deleted and '0' published, Redisson's unlock message (a
-- literal: an argument costs Redis more per call, and the message never varies). When somebody
-- heard it: if a waiter has said it starves, the lock goes straight to the one that said so
-- first, with the short handed lease (a waiter that died meanwhile delays the lock by that
-- much at most), and '0' is published on that waiter's own channel
-- (redisson_lock__channel:{name}:<owner>); else, when the lock's channel has subscribers that
-- are not ferrisson clients (every ferrisson client waiting on the lock also listens on
-- redisson_lock__channel:{name}:ferrisson; a Java Redisson waiter does not), '0' goes to that
-- channel too: ferrisson waiters then give those others the first go at the lock.
--
-- Replies: 1 released (the owner's last hold: lock deleted or handed, message published), 0
-- (full form) holds of the owner remain, 3 (short form) the owner has several holds (nothing
-- changed), nil the owner holds nothing (nothing changed), 2 (resends only) the owner holds
-- nothing and no partial release by this request is recorded.
-- Errors: WRONGTYPE when the lock key holds another type (nothing changed). A starving set of
-- another type is ignored.

-- ARGV[4] is nil in the short form, which is never a resend.
if ARGV[4] == '1' then
  local done = redis.call('get', KEYS[4])
  if done then
    return tonumber(done)
  end
end
local holds = tonumber(redis.call('hget', KEYS[1], ARGV[1]))
if not holds then
  if ARGV[4] == '1' then
    return 2
  end
  return nil
end
if holds > 1 then
  if not KEYS[4] then
    return 3
  end
  redis.call('hset', KEYS[1], ARGV[1], holds - 1)
  redis.call('pexpire', KEYS[1], ARGV[2])
  redis.call('set', KEYS[4], 0, 'px', ARGV[3])
  return 0
end
redis.call('del', KEYS[1])
-- Waiters listen on the lock's channel: a release nobody hears (the common, uncontended one)
-- reads nothing more.
if redis.call('publish', KEYS[2], '0') > 0 then
  local subscribers = redis.call('pubsub', 'numsub', KEYS[2], KEYS[2] .. ':ferrisson')
  -- Who gets the freed lock. Other libraries' waiters (subscribers of the lock's channel that
  -- are not ferrisson clients) and ferrisson's starving waiters take turns: the marker '!' in the
  -- starving set records that the last such release went to a starving waiter.
  local foreign = subscribers[2] > subscribers[4]
  local owed = foreign and redis.pcall('zscore', KEYS[3], '!')
  local handed
  if owed and type(owed) ~= 'table' then
    redis.call('zrem', KEYS[3], '!')
  else
    -- The first starving waiter still listening on its own channel: one that died or gave up
    -- has left it (its entry goes here), and the releasing owner's own entry is stale.
    for _ = 1, 8 do
      local entry = redis.pcall('zpopmin', KEYS[3])
      if not entry[1] then
        break
      end
      if entry[1] ~= ARGV[1] and entry[1] ~= '!'
          and redis.call('pubsub', 'numsub', KEYS[2] .. ':' .. entry[1])[2] > 0 then
        handed = entry[1]
        break
      end
    end
  end
  if handed then
    -- Handed before anyone woken by the unlock message can ask: they find it held, for the
    -- short handed lease at most.
    redis.call('hset', KEYS[1], handed, 1)
    redis.call('pexpire', KEYS[1], ARGV[5] or ARGV[2])
    redis.call('publish', KEYS[2] .. ':' .. handed, '0')
    if foreign then
      redis.call('zadd', KEYS[3], 'inf', '!')
      redis.call('pexpire', KEYS[3], 60000)
    end
  elseif foreign then
    -- Other libraries' waiters get the first go: ferrisson's waiters that do not starve hold
    -- back when they hear this.
    redis.call('publish', KEYS[2] .. ':ferrisson', '0')
  end
end
return 1
