-- Sets an owner's read or write hold count on a read-write lock back to what its client knows,
-- after an acquire whose reply never came. Never brings back a hold the server no longer has.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the lock's channel
-- KEYS[3]  this owner's read-hold timeout prefix
-- ARGV[1]  the field to repair: <owner> (read holds) or <owner>:write
-- ARGV[2]  holds the client knows of (0: none)
-- ARGV[3]  'read' or 'write'
-- ARGV[4]  the lease in ms the owner's remaining holds were given (restores a TTL that an
--          acquire which ran after all may have shortened)
--
-- Reply: 1 when the count was changed, 0 when it already matched or the owner holds nothing.

if redis.call('type', KEYS[1]).ok ~= 'hash' then
  return 0
end
local have = tonumber(redis.call('hget', KEYS[1], ARGV[1]))
local want = tonumber(ARGV[2])
if have == nil or have <= want then
  return 0
end
if ARGV[3] == 'read' then
  for k = want + 1, have do
    redis.call('del', KEYS[3] .. ':' .. k)
  end
end
if want > 0 then
  redis.call('hset', KEYS[1], ARGV[1], want)
  if redis.call('pttl', KEYS[1]) < tonumber(ARGV[4]) then
    redis.call('pexpire', KEYS[1], ARGV[4])
  end
  return 1
end
redis.call('hdel', KEYS[1], ARGV[1])
if redis.call('hlen', KEYS[1]) <= 1 then
  redis.call('del', KEYS[1])
elseif ARGV[3] == 'write' then
  redis.call('hset', KEYS[1], 'mode', 'read')
end
redis.call('publish', KEYS[2], '1')
return 1
