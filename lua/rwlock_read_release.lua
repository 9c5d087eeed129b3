-- Gives back one read hold. The hash then lives as long as the longest remaining read hold; when
-- no live read hold is left (holders that died count as none), the lock is deleted and a waiting
-- writer is woken. Safe to resend, as lock_release.lua: a partial release keeps its reply in a
-- latch, and a resend that finds no read hold answers 2.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the lock's channel (redisson_rwlock:{name})
-- KEYS[3]  this owner's read-hold timeout prefix
-- KEYS[4]  the latch of this request
-- KEYS[5]  (writer preference only; absent under Redisson's policy) the waiting writers' marks
--          ({name}:ferrisson_writers): while there are any, the release that frees the lock
--          publishes '1' instead of '0', so the waiting writer wakes even when readers held
--          back by its mark wait on the same client (a '0' wakes only one waiter there, and
--          could wake a reader that is refused again)
-- ARGV[1]  owner
-- ARGV[2]  latch TTL in ms
-- ARGV[3]  the prefix every owner's timeout keys start with ({name}), for '<p>:<owner>:rwlock_timeout:<k>'
-- ARGV[4]  '1' when this request is a resend, else '0'
--
-- Replies: 1 the owner's last read hold went; 0 read holds of the owner remain; nil the owner
-- had no read hold (nothing changed); 2 (resends only) no read hold and no partial release by
-- this request recorded.
-- Errors: WRONGTYPE when the lock key holds another type (nothing changed).

if ARGV[4] == '1' then
  local done = redis.call('get', KEYS[4])
  if done then
    return tonumber(done)
  end
end
local holds = tonumber(redis.call('hget', KEYS[1], ARGV[1]))
if not holds or holds < 1 then
  if ARGV[4] == '1' then
    return 2
  end
  return nil
end

redis.call('del', KEYS[3] .. ':' .. holds)
local reply = 0
if holds > 1 then
  redis.call('hincrby', KEYS[1], ARGV[1], -1)
else
  redis.call('hdel', KEYS[1], ARGV[1])
  reply = 1
end

if redis.call('hget', KEYS[1], 'mode') == 'read' then
  -- The hash lives as long as the longest live read hold, of any owner.
  local longest = 0
  local fields = redis.call('hgetall', KEYS[1])
  for i = 1, #fields, 2 do
    local count = tonumber(fields[i + 1])
    if fields[i] ~= 'mode' and count then
      for k = 1, count do
        local ttl = redis.call('pttl', ARGV[3] .. ':' .. fields[i] .. ':rwlock_timeout:' .. k)
        if ttl > longest then
          longest = ttl
        end
      end
    end
  end
  if longest > 0 then
    redis.call('pexpire', KEYS[1], longest)
  else
    redis.call('del', KEYS[1])
    if KEYS[5] and redis.call('exists', KEYS[5]) == 1 then
      redis.call('publish', KEYS[2], '1')
    else
      redis.call('publish', KEYS[2], '0')
    end
  end
end
if reply == 0 then
  redis.call('set', KEYS[4], 0, 'px', ARGV[2])
end
return reply
