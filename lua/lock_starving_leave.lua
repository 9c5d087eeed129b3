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
    redis.call('pexpire', KEYS[1], ARGV[2])
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
