-- A Java Redisson client's RLock, played by the tests and the fairness benchmark: written from
-- Redisson 3.x's documented behaviour (a hash of <uuid>:<threadId> -> hold count with a lease,
-- '0' published on the lock's channel when the last hold goes), not from its code.
--
-- ARGV[1] 'lock' or 'unlock'
-- lock:   KEYS[1] lock; ARGV[2] owner, ARGV[3] lease ms. Reply: nil taken (or once more),
--         else the lock's remaining TTL in ms.
-- unlock: KEYS[1] lock, KEYS[2] channel; ARGV[2] owner, ARGV[3] lease ms. Reply: nil not
--         held by the owner, 0 holds remain, 1 released and published.

if ARGV[1] == 'lock' then
  local mine = redis.call('hexists', KEYS[1], ARGV[2]) == 1
  if mine or redis.call('exists', KEYS[1]) == 0 then
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[3])
    return nil
  end
  return redis.call('pttl', KEYS[1])
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
  return nil
end
if redis.call('hincrby', KEYS[1], ARGV[2], -1) > 0 then
  redis.call('pexpire', KEYS[1], ARGV[3])
  return 0
end
redis.call('del', KEYS[1])
redis.call('publish', KEYS[2], '0')
return 1
