-- Asks the current holders of a lock, of one side of a read-write lock, or of a semaphore's
-- permits to let go (cooperative revocation: nothing is released here). Each hold is marked in
-- a hash that lives about one lease, so a holder that is not listening now still learns of it
-- at its next renewal, and a message on the revocation channel tells the holders listening now.
--
-- KEYS[1]  the object: a lock hash, or a permit-expirable semaphore's {name}:timeout zset
-- KEYS[2]  its revocation requests (ferrisson_revoke:{name}: hold -> requested at, server µs)
-- KEYS[3]  the revocation channel (ferrisson_revoke:{name}); no Redisson client listens there
-- ARGV[1]  which holds: 'lock' (every owner of a lock hash), 'read' (readers of a read-write
--          lock), 'write' (its writer), 'permits' (every permit out)
-- ARGV[2]  the least time the request lives, in ms (it also lives as long as the holds may)
--
-- Replies: the number of holds asked to let go (0: nobody holds it; nothing recorded).
-- Errors: WRONGTYPE when the object holds another type (nothing changed).

local clock = redis.call('time')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
-- The request's stamp, in µs as a fencing token is: a lock's hold heeds only a request stamped
-- no earlier than its token, so a request left from an earlier hold of the same owner name
-- never reaches a later one (whose token is at least the clock at its grant). Joined as text:
-- exact, where a Lua number would print as 1.7e+15.
local stamp = clock[1] .. string.format('%06d', tonumber(clock[2]))
local kind = redis.call('type', KEYS[1])['ok']
local holds = {}
local ttl = tonumber(ARGV[2])
if ARGV[1] == 'permits' then
  if kind ~= 'none' and kind ~= 'zset' then
    return redis.error_reply('WRONGTYPE key ' .. KEYS[1] .. ' holds no semaphore permits')
  end
  if kind == 'zset' then
    holds = redis.call('zrangebyscore', KEYS[1], '(' .. now, '+inf')
    local last = redis.call('zrange', KEYS[1], -1, -1, 'withscores')
    if last[2] then
      ttl = math.max(ttl, tonumber(last[2]) - now)
    end
  end
else
  if kind ~= 'none' and kind ~= 'hash' then
    return redis.error_reply('WRONGTYPE key ' .. KEYS[1] .. ' holds no lock')
  end
  if kind == 'hash' then
    for _, field in ipairs(redis.call('hkeys', KEYS[1])) do
      local writer = string.sub(field, -6) == ':write'
      if field ~= 'mode' and (ARGV[1] == 'lock' or (ARGV[1] == 'write') == writer) then
        holds[#holds + 1] = field
      end
    end
    ttl = math.max(ttl, redis.call('pttl', KEYS[1]))
  end
end
if #holds == 0 then
  return 0
end
local kinds = redis.call('type', KEYS[2])['ok']
if kinds ~= 'none' and kinds ~= 'hash' then
  return redis.error_reply('WRONGTYPE key ' .. KEYS[2] .. ' holds no revocation requests')
end
for _, hold in ipairs(holds) do
  redis.call('hset', KEYS[2], hold, stamp)
end
if redis.call('pttl', KEYS[2]) < ttl then
  redis.call('pexpire', KEYS[2], ttl)
end
redis.call('publish', KEYS[3], #holds)
return #holds
