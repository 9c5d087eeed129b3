-- Takes an RLock waiter that stops waiting (its wait ran out or was cancelled) out of the
-- lock's starving waiters. A release may have handed it the lock already, a hold it will never
-- take up: that hold is given back as the waiter's release would (to the next starving waiter,
-- else freed), so the lock is not left idle for the handed lease.
--
-- The client sends this only while the owner holds nothing and no other operation of the owner
-- runs, so a hold of the owner on the server is one handed to it.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the lock's channel
-- KEYS[3]  the lock's starving waiters (see lock_acquire.lua)
-- ARGV[1]  owner
-- ARGV[2]  the lease in ms of a hold handed to the next starving waiter
--
-- Reply: 1 when a handed hold was given back, else 0. A key of another type changes nothing.

local holds = redis.pcall('hget', KEYS[1], ARGV[1])
if holds ~= '1' then
  redis.pcall('zrem', KEYS[3], ARGV[1])
  return 0
end
redis.pcall('zrem', KEYS[3], ARGV[1])
redis.call('del', KEYS[1])
-- As lock_release.lua's last hold.
if redis.call('publish', KEYS[2], '0') > 0 then
  local starving = redis.pcall('zpopmin', KEYS[3])
  if starving[1] then
    redis.call('hset', KEYS[1], starving[1], 1)
    redis.call('pexpire', KEYS[1], ARGV[2])
    redis.call('publish', KEYS[2] .. ':' .. starving[1], '0')
  else
    local subscribers = redis.call('pubsub', 'numsub', KEYS[2], KEYS[2] .. ':ferrisson')
    if subscribers[2] > subscribers[4] then
      redis.call('publish', KEYS[2] .. ':ferrisson', '0')
    end
  end
end
return 1
