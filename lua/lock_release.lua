-- Gives back one hold of an RLock. Safe to resend: a partial release leaves its reply in a
-- short-lived latch keyed by the request id, and a resend is answered from it; a resend that
-- finds no hold says so (2) instead of "not the owner", since the first send may have released
-- the last hold. The common case, the last hold going, writes no latch.
--
-- Two forms, told apart by the number of KEYS:
--
-- Full form (3 KEYS, 4 ARGV), any release:
-- KEYS[1]  the lock hash
-- KEYS[2]  the lock's channel (redisson_lock__channel:{name})
-- KEYS[3]  the latch of this request (redisson_unlock_latch:{name}:<request-id>)
-- ARGV[1]  owner
-- ARGV[2]  lease in ms: the TTL the lock gets back while holds remain
-- ARGV[3]  latch TTL in ms
-- ARGV[4]  '1' when this request is a resend, else '0'
--
-- Short form (KEYS[1], KEYS[2], ARGV[1] as above, nothing else), for a first send the client
-- believes gives back the owner's last hold. It never decrements, so it needs neither a latch
-- nor a lease (each key or argument costs Redis a little on every call): when the owner has
-- several holds it changes nothing and replies 3, and the client then removes them all. A
-- short send is never resent as such: resends use the full form, whose latch this form never
-- writes.
--
-- The lock becoming free publishes '0', Redisson's unlock message (a literal: an argument costs
-- Redis more per call, and the message never varies).
--
-- Replies: 1 released (the owner's last hold: lock deleted, message published), 0 (full form)
-- holds of the owner remain, 3 (short form) the owner has several holds (nothing changed), nil
-- the owner holds nothing (nothing changed), 2 (resends only) the owner holds nothing and no
-- partial release by this request is recorded.
-- Errors: WRONGTYPE when the lock key holds another type (nothing changed).

-- ARGV[4] is nil in the short form, which is never a resend.
if ARGV[4] == '1' then
  local done = redis.call('get', KEYS[3])
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
  if not KEYS[3] then
    return 3
  end
  redis.call('hset', KEYS[1], ARGV[1], holds - 1)
  redis.call('pexpire', KEYS[1], ARGV[2])
  redis.call('set', KEYS[3], 0, 'px', ARGV[3])
  return 0
end
redis.call('del', KEYS[1])
redis.call('publish', KEYS[2], '0')
return 1
