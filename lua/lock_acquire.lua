-- Takes an RLock, or one more hold of it for its owner (reentrancy).
--
-- KEYS[1]  the lock: a hash, field <owner> -> hold count, PEXPIRE = lease
-- KEYS[2]  the fencing counter of the lock's cluster slot (ferrisson_token:{<tag>}, never expires)
-- KEYS[3]  (fenced locks only) Redisson's counter of the lock name, redisson_lock_token:{name}
-- ARGV[1]  owner (<client-uuid>:<n>)
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  '1' when the client knows of no live hold of this owner: a hold the server still has
--          for it is stale (a release or repair whose outcome never reached the client) and is
--          replaced by a fresh grant, so a new guard never carries an old token
--
-- Tokens: a new grant takes the slot's counter up by one; a fenced lock also takes the name's
-- counter up, and both end at the larger value, which is the token. Every earlier grant of the
-- name left the slot's counter at least at its token, so tokens increase per name, and a Java
-- RFencedLock counting on the name's counter stays in one sequence with the fenced lock.
--
-- Replies:
--   {1, token}  granted anew
--   {2, 0}      granted again to the owner that holds it (TTL reset to the lease); the hold keeps
--               the token of its first grant
--   {0, pttl}   held by another owner; pttl is the lock's remaining TTL in ms, -1 without TTL
-- Errors: WRONGTYPE when a key holds another type. The lock is never changed then (the INCR is
-- the first write: a server refusing writes refuses it).

local function counter_error(key, err)
  if string.find(err, 'WRONGTYPE', 1, true) or string.find(err, 'not an integer', 1, true) then
    return redis.error_reply('WRONGTYPE key ' .. key .. ' holds no counter')
  end
  return redis.error_reply(err)
end

local function grant()
  local token = redis.pcall('incr', KEYS[2])
  if type(token) == 'table' then
    return counter_error(KEYS[2], token.err)
  end
  if KEYS[3] then
    local named = redis.pcall('incr', KEYS[3])
    if type(named) == 'table' then
      return counter_error(KEYS[3], named.err)
    end
    if named > token then
      redis.call('set', KEYS[2], named)
      token = named
    elseif token > named then
      redis.call('set', KEYS[3], token)
    end
  end
  redis.call('hset', KEYS[1], ARGV[1], 1)
  redis.call('pexpire', KEYS[1], ARGV[2])
  return {1, token}
end

local kind = redis.call('type', KEYS[1]).ok
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
  redis.call('hincrby', KEYS[1], ARGV[1], 1)
  redis.call('pexpire', KEYS[1], ARGV[2])
  return {2, 0}
end

return {0, redis.call('pttl', KEYS[1])}
