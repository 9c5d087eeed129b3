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
-- Replies: one integer. A {status, value} table costs Redis about 0.4 µs more a call than an
-- integer (building the table, converting it, a reply of deferred length) and the client an
-- allocation; the other lock kinds keep the table.
--   token >= 1  granted anew
--   0           granted again to the owner that holds it (TTL reset to the lease); the hold keeps
--               the token of its first grant
--   -2 - pttl   held by another owner; pttl is the lock's remaining TTL in ms, -1 without TTL
--               (so -1: no TTL; -2 - n: n ms left)
-- Errors: WRONGTYPE when a key holds another type; ERR when the token would be below 1 (a
-- counter set by hand below 0), as such a token could not be told from the other replies.
-- The lock is never changed then (the INCR is the first write: a server refusing writes
-- refuses it; the counters may have moved up, which costs no guarantee).

-- Cost: every redis.call costs Redis about as much as the command itself again, and each
-- closure a run defines is an allocation, so the common paths are straight-line code: a free
-- lock is PTTL, INCR, HSET, PEXPIRE; a busy one PTTL, HEXISTS (BENCHMARKS.md, notes).

local pttl = redis.call('pttl', KEYS[1])
if pttl ~= -2 then
  local mine = redis.pcall('hexists', KEYS[1], ARGV[1])
  if type(mine) == 'table' then
    return redis.error_reply('WRONGTYPE key ' .. KEYS[1] .. ' holds a ' .. redis.call('type', KEYS[1]).ok)
  end
  if mine == 0 then
    return -2 - pttl
  end
  if ARGV[3] ~= '1' then
    redis.call('hincrby', KEYS[1], ARGV[1], 1)
    redis.call('pexpire', KEYS[1], ARGV[2])
    return 0
  end
end

-- A new grant (the lock is free, or holds a stale hold of this owner).
local token = redis.pcall('incr', KEYS[2])
if type(token) == 'table' then
  if string.find(token.err, 'WRONGTYPE', 1, true) or string.find(token.err, 'not an integer', 1, true) then
    return redis.error_reply('WRONGTYPE key ' .. KEYS[2] .. ' holds no counter')
  end
  return redis.error_reply(token.err)
end
if KEYS[3] then
  local named = redis.pcall('incr', KEYS[3])
  if type(named) == 'table' then
    if string.find(named.err, 'WRONGTYPE', 1, true) or string.find(named.err, 'not an integer', 1, true) then
      return redis.error_reply('WRONGTYPE key ' .. KEYS[3] .. ' holds no counter')
    end
    return redis.error_reply(named.err)
  end
  if named > token then
    redis.call('set', KEYS[2], named)
    token = named
  elseif token > named then
    redis.call('set', KEYS[3], token)
  end
end
if token < 1 then
  return redis.error_reply('ERR fencing counter ' .. KEYS[2] .. ' at ' .. token
    .. ': no token below 1 is handed out')
end
redis.call('hset', KEYS[1], ARGV[1], 1)
redis.call('pexpire', KEYS[1], ARGV[2])
return token
