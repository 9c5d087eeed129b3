-- Sets an owner's hold count back to what its client knows, after an acquire whose reply never
-- came (timeout, dropped connection, cancelled caller): the client is the source of truth for
-- its own holds.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the lock's channel; for a fair lock, its waiters' channel prefix
-- KEYS[3]  (fair locks only) the queue: the message then goes to its head, '<prefix>:<head>'
-- ARGV[1]  owner
-- ARGV[2]  holds the client knows of (0: none)
-- ARGV[3]  the message published when the repair frees the lock ('0')
-- ARGV[4]  the lease in ms the owner's remaining holds were given: an acquire that ran after
--          all may have shortened the TTL, and the owner's guards count on that lease
--
-- Reply: 1 when the hold count was changed, 0 when it already matched or the owner holds
-- nothing (a lost hold is never brought back).

if redis.call('type', KEYS[1]).ok ~= 'hash' then
  return 0
end
local have = tonumber(redis.call('hget', KEYS[1], ARGV[1]))
local want = tonumber(ARGV[2])
if have == nil or have == want then
  return 0
end
if want > 0 then
  redis.call('hset', KEYS[1], ARGV[1], want)
  if redis.call('pttl', KEYS[1]) < tonumber(ARGV[4]) then
    redis.call('pexpire', KEYS[1], ARGV[4])
  end
  return 1
end
redis.call('hdel', KEYS[1], ARGV[1])
if redis.call('exists', KEYS[1]) == 0 then
  if KEYS[3] then
    local head = redis.pcall('lindex', KEYS[3], 0)
    if type(head) == 'string' then
      redis.call('publish', KEYS[2] .. ':' .. head, ARGV[3])
    end
  else
    redis.call('publish', KEYS[2], ARGV[3])
  end
end
return 1
