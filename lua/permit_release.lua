-- Gives back permits of a permit-expirable semaphore by id (a holder's release, release_by_id,
-- or the undo of an acquire whose answer never came back), after giving back the expired ones.
-- A permit whose expiry has passed counts as gone, so a late release adds nothing: the expired
-- permit came back once, when it was reclaimed.
--
-- KEYS[1]  the semaphore: a string count of free permits
-- KEYS[2]  the permits out: a zset of permit id -> expiry in epoch ms ({name}:timeout)
-- KEYS[3]  the semaphore's channel (redisson_sc:{name})
-- KEYS[4]  (an undo only) the acquire's tombstone: set, so that a late delivery of the acquire
--          takes nothing (permit_acquire.lua)
-- ARGV[1]  how long the tombstone lives, in ms (ignored without KEYS[4])
-- ARGV[2..] the permit ids
--
-- Replies: {released, free}: how many of the ids were out and are given back, the permits free
-- now. Publishes the free count when anything came back.
-- Errors: WRONGTYPE when a key holds another type (nothing changed).

local function wrongtype(key)
  return redis.error_reply('WRONGTYPE key ' .. key .. ' holds no semaphore')
end

local free = redis.pcall('get', KEYS[1])
if type(free) == 'table' or (free and not tonumber(free)) then
  return wrongtype(KEYS[1])
end
free = tonumber(free) or 0
local kind = redis.call('type', KEYS[2])['ok']
if kind ~= 'none' and kind ~= 'zset' then
  return wrongtype(KEYS[2])
end
if KEYS[4] then
  redis.call('set', KEYS[4], 'undone', 'px', ARGV[1])
end
if kind == 'none' then
  return {0, free}
end

local clock = redis.call('time')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local back = redis.call('zremrangebyscore', KEYS[2], '-inf', now)
local released = 0
local batch = {}
for i = 2, #ARGV do
  batch[#batch + 1] = ARGV[i]
  if #batch >= 1000 or i == #ARGV then
    released = released + redis.call('zrem', KEYS[2], unpack(batch))
    batch = {}
  end
end
back = back + released
if back > 0 then
  free = redis.call('incrby', KEYS[1], back)
  redis.call('publish', KEYS[3], free)
end
return {released, free}
