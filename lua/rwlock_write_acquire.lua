-- Takes the write hold of a read-write lock, or one more of it (reentrancy). Readers whose
-- every read hold has expired (a crashed process) no longer count: they are removed first, so a
-- live reader that keeps renewing its own holds cannot keep a dead one's holds alive.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the fencing counter of the lock's cluster slot (see lock_acquire.lua)
-- ARGV[1]  the owner's write field (<owner>:write)
-- ARGV[2]  lease in ms
-- ARGV[3]  owner (its read-hold field)
-- ARGV[4]  the prefix every owner's timeout keys start with ({name})
-- ARGV[5]  '1' when the client knows of no live write hold of this owner: a write hold the
--          server still has for it is stale and is replaced by a fresh grant (a new token)
--
-- Replies: {1, token} granted anew; {2, 0} one more write hold; {0, pttl} held by others (pttl -1: no TTL); {3, 0} the owner holds read holds but no
-- write hold: an upgrade would wait for itself for ever, so it is refused.
-- Errors: WRONGTYPE when a key holds another type; nothing is written then.

local kind = redis.call('type', KEYS[1]).ok
if kind ~= 'none' and kind ~= 'hash' then
  return redis.error_reply('WRONGTYPE key ' .. KEYS[1] .. ' holds a ' .. kind)
end
local counter = redis.pcall('get', KEYS[2])
if type(counter) == 'table' or (counter and not tonumber(counter)) then
  return redis.error_reply('WRONGTYPE key ' .. KEYS[2] .. ' holds no counter')
end

local mode = redis.call('hget', KEYS[1], 'mode')
if kind == 'hash' and not mode then
  -- Another kind of lock (an RLock) holds this name.
  return {0, redis.call('pttl', KEYS[1])}
end
if mode == 'read' then
  local fields = redis.call('hgetall', KEYS[1])
  for i = 1, #fields, 2 do
    local count = tonumber(fields[i + 1])
    if fields[i] ~= 'mode' and count then
      local alive = false
      for k = 1, count do
        if redis.call('exists', ARGV[4] .. ':' .. fields[i] .. ':rwlock_timeout:' .. k) == 1 then
          alive = true
          break
        end
      end
      if not alive then
        redis.call('hdel', KEYS[1], fields[i])
      end
    end
  end
  if redis.call('hlen', KEYS[1]) <= 1 then
    redis.call('del', KEYS[1])
    mode = false
  end
end

if not mode then
  local token = redis.call('incr', KEYS[2])
  redis.call('hset', KEYS[1], 'mode', 'write', ARGV[1], 1)
  redis.call('pexpire', KEYS[1], ARGV[2])
  return {1, token}
end
if mode == 'write' and redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
  local reply = {2, 0}
  if ARGV[5] == '1' then
    reply = {1, redis.call('incr', KEYS[2])}
    redis.call('hset', KEYS[1], ARGV[1], 1)
  else
    redis.call('hincrby', KEYS[1], ARGV[1], 1)
  end
  if redis.call('pttl', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('pexpire', KEYS[1], ARGV[2])
  end
  return reply
end
if redis.call('hexists', KEYS[1], ARGV[3]) == 1 then
  return {3, 0}
end
return {0, redis.call('pttl', KEYS[1])}
