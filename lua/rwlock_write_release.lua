-- Gives back one write hold. The last one frees the lock, or, when the owner still has read
-- holds, turns it back into a read lock (downgrade); either way every waiter is woken with '1'.
-- Safe to resend, as lock_release.lua: a partial release keeps its reply in a latch, and a
-- resend that finds no write hold answers 2.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the lock's channel (redisson_rwlock:{name})
-- KEYS[3]  this owner's read-hold timeout prefix
-- KEYS[4]  the latch of this request
-- ARGV[1]  the owner's write field (<owner>:write)
-- ARGV[2]  lease in ms: the TTL the lock gets back while write holds remain
-- ARGV[3]  latch TTL in ms
-- ARGV[4]  owner (its read-hold field)
-- ARGV[5]  '1' when this request is a resend, else '0'
--
-- Replies: 1 the owner's last write hold went; 0 write holds remain; nil the owner had no write
-- hold (nothing changed); 2 (resends only) no write hold and no partial release by this request
-- recorded.
-- Errors: WRONGTYPE when the lock key holds another type (nothing changed).

if ARGV[5] == '1' then
  local done = redis.call('get', KEYS[4])
  if done then
    return tonumber(done)
  end
end
if redis.call('hget', KEYS[1], 'mode') ~= 'write' or redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  if ARGV[5] == '1' then
    return 2
  end
  return nil
end

local reply = 0
if redis.call('hincrby', KEYS[1], ARGV[1], -1) > 0 then
  if redis.call('pttl', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('pexpire', KEYS[1], ARGV[2])
  end
else
  reply = 1
  redis.call('hdel', KEYS[1], ARGV[1])
  local reads = tonumber(redis.call('hget', KEYS[1], ARGV[4])) or 0
  local longest = 0
  for k = 1, reads do
    local ttl = redis.call('pttl', KEYS[3] .. ':' .. k)
    if ttl > longest then
      longest = ttl
    end
  end
  if longest > 0 then
    redis.call('hset', KEYS[1], 'mode', 'read')
    redis.call('pexpire', KEYS[1], longest)
  else
    redis.call('del', KEYS[1])
  end
  redis.call('publish', KEYS[2], '1')
end
if reply == 0 then
  redis.call('set', KEYS[4], 0, 'px', ARGV[3])
end
return reply
