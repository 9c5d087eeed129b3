-- Takes an RLock, or one more hold of it for its owner (reentrancy).
--
-- KEYS[1]  the lock: a hash, field <owner> -> hold count, PEXPIRE = lease
-- KEYS[2]  the fencing counter of the lock name (a string, never expires)
-- ARGV[1]  owner (<client-uuid>:<n>)
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  '1' when the client knows of no live hold of this owner: a hold the server still has
--          for it is stale (a release or repair whose outcome never reached the client) and is
--          replaced by a fresh grant, so a new guard never carries an old token
--
-- Replies:
--   {1, token}  granted anew; token is the counter after its INCR
--   {2, token}  granted again to the owner that holds it (TTL reset to the lease); token is the
--               counter's current value, which no grant has moved since the owner got the lock
--   {0, pttl}   held by another owner; pttl is the lock's remaining TTL in ms, -1 without TTL
-- Errors: WRONGTYPE when a key holds another type; any error comes before the first write, so
-- it changes nothing (the INCR is the first write: a server refusing writes refuses it).

local kind = redis.call('type', KEYS[1]).ok

local function counter_error(err)
  if string.find(err, 'WRONGTYPE', 1, true) or string.find(err, 'not an integer', 1, true) then
    return redis.error_reply('WRONGTYPE key ' .. KEYS[2] .. ' holds no counter')
  end
  return redis.error_reply(err)
end

local function grant()
  local token = redis.pcall('incr', KEYS[2])
  if type(token) == 'table' then
    return counter_error(token.err)
  end
  redis.call('hset', KEYS[1], ARGV[1], 1)
  redis.call('pexpire', KEYS[1], ARGV[2])
  return {1, token}
end

if kind == 'none' then
  return grant()
end
if kind ~= 'hash' then
  return redis.error_reply('WRONGTYPE key ' .. KEYS[1] .. ' holds a ' .. kind)
end

if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
  if ARGV[3] == '1' then
    return grant()
  end
  local current = redis.pcall('get', KEYS[2])
  if type(current) == 'table' then
    return counter_error(current.err)
  end
  redis.call('hincrby', KEYS[1], ARGV[1], 1)
  redis.call('pexpire', KEYS[1], ARGV[2])
  return {2, tonumber(current) or 0}
end

return {0, redis.call('pttl', KEYS[1])}
