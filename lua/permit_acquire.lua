-- Takes n permits of a permit-expirable semaphore (Redisson's RPermitExpirableSemaphore) in one
-- step, all or none, each under its own id with an expiry judged by this server's clock.
--
-- KEYS[1]  the semaphore: a string count of free permits
-- KEYS[2]  the permits out: a zset of permit id -> expiry in epoch ms ({name}:timeout)
-- KEYS[3]  the semaphore's channel (redisson_sc:{name})
-- KEYS[4]  the fencing counter of the name's cluster slot (ferrisson_token:{<tag>})
-- KEYS[5]  this request's tombstone, set when the request was given up on (permit_release.lua)
-- ARGV[1]  the lease in ms
-- ARGV[2..] the ids of the permits to take (n = #ARGV - 1)
--
-- Every script of the semaphore first gives back the permits whose expiry has passed, so a dead
-- holder's permits return at the next touch of the semaphore by anybody, not only an acquirer.
--
-- Replies:
--   {1, token, free}  taken; free: permits free now
--   {0, free, wait}   not enough free; wait: ms until the first permit out expires (-1: none)
--   {-1, 0, 0}        the request was given up on already (a late delivery): nothing taken
--   {-2, total, 0}    n is more than all the permits the semaphore has, free and out
-- Errors: WRONGTYPE when a key holds another type (nothing changed).

local function wrongtype(key)
  return redis.error_reply('WRONGTYPE key ' .. key .. ' holds no semaphore')
end

if redis.call('exists', KEYS[5]) == 1 then
  return {-1, 0, 0}
end
-- Redis before 7 replicates a script by its commands only when asked, before any write (the
-- script reads the server's clock).
if redis.replicate_commands then
  redis.replicate_commands()
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
local counter = redis.pcall('get', KEYS[4])
if type(counter) == 'table' or (counter and not (string.match(counter, '^%-?%d+$')
    and tonumber(counter) <= 9007199254740990)) then
  return redis.error_reply('WRONGTYPE key ' .. KEYS[4] .. ' holds no counter')
end

local clock = redis.call('time')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local expired = 0
if kind == 'zset' then
  expired = redis.call('zremrangebyscore', KEYS[2], '-inf', now)
  if expired > 0 then
    free = redis.call('incrby', KEYS[1], expired)
    known = true
  end
end

local n = #ARGV - 1
if free >= n then
  redis.call('decrby', KEYS[1], n)
  local expiry = now + tonumber(ARGV[1])
  local batch = {}
  for i = 2, #ARGV do
    batch[#batch + 1] = expiry
    batch[#batch + 1] = ARGV[i]
    if #batch >= 1000 or i == #ARGV then
      redis.call('zadd', KEYS[2], unpack(batch))
      batch = {}
    end
  end
  -- The token: the server's clock in microseconds, or the counter + 1 when the counter is
  -- ahead of it; the counter ends at the token (see lock_acquire.lua).
  local token = tonumber(clock[1] .. string.format('%06d', clock[2]))
  if counter and tonumber(counter) >= token then
    token = tonumber(counter) + 1
  end
  redis.call('set', KEYS[4], string.format('%d', token))
  if expired > 0 and free > n then
    redis.call('publish', KEYS[3], free - n)
  end
  return {1, token, free - n}
end

if expired > 0 and free > 0 then
  redis.call('publish', KEYS[3], free)
end
local out = redis.call('zcard', KEYS[2])
if known and n > free + out then
  return {-2, free + out, 0}
end
local first = redis.call('zrange', KEYS[2], 0, 0, 'withscores')
local wait = -1
if first[2] then
  wait = math.max(0, tonumber(first[2]) - now)
end
return {0, free, wait}
