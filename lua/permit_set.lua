-- Sets, adds to, or reads the permits of a permit-expirable semaphore, after giving back the
-- expired ones (Redisson's trySetPermits, addPermits, availablePermits).
--
-- KEYS[1]  the semaphore: a string count of free permits
-- KEYS[2]  the permits out: a zset of permit id -> expiry in epoch ms ({name}:timeout)
-- KEYS[3]  the semaphore's channel (redisson_sc:{name})
-- ARGV[1]  'set' with ARGV[2] the permits (only when none were ever set), 'add' with ARGV[2]
--          the permits to add (may be negative), or 'free'
--
-- Replies: 'set': 1 when set, 0 when set already (only expired permits reclaimed); 'add' and
-- 'free': the permits free now (0 when none were ever set).
-- Errors: WRONGTYPE when a key holds another type (nothing changed).

local function wrongtype(key)
  return redis.error_reply('WRONGTYPE key ' .. key .. ' holds no semaphore')
end

local free = redis.pcall('get', KEYS[1])
if type(free) == 'table' or (free and not tonumber(free)) then
  return wrongtype(KEYS[1])
end
local known = free ~= false
free = tonumber(free) or 0
local kind = redis.call('type', KEYS[2])['ok']
if kind ~= 'none' and kind ~= 'zset' then
  return wrongtype(KEYS[2])
end

local changed = false
if kind == 'zset' then
  local clock = redis.call('time')
  local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
  local back = redis.call('zremrangebyscore', KEYS[2], '-inf', now)
  if back > 0 then
    free = redis.call('incrby', KEYS[1], back)
    known = true
    changed = true
  end
end

local reply = free
if ARGV[1] == 'set' then
  reply = 0
  if not known then
    free = tonumber(ARGV[2])
    redis.call('set', KEYS[1], free)
    changed = true
    reply = 1
  end
elseif ARGV[1] == 'add' then
  free = redis.call('incrby', KEYS[1], ARGV[2])
  changed = true
  reply = free
end
if changed then
  redis.call('publish', KEYS[3], free)
end
return reply
