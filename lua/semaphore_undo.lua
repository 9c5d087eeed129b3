-- Gives back the permits an acquire took whose caller never heard the answer (it timed out or
-- was cancelled), and makes sure that acquire takes nothing if it reaches Redis only now.
--
-- KEYS[1]  the semaphore: a string count of free permits
-- KEYS[2]  the request's record (see semaphore_acquire.lua)
-- KEYS[3]  the semaphore's channel (redisson_sc:{name})
-- ARGV[1]  how long the record lives, in ms
--
-- Replies: the permits given back (0 when the acquire took none).

local taken = tonumber(redis.call('get', KEYS[2]))
redis.call('set', KEYS[2], 'undone', 'px', ARGV[1])
if not taken then
  return 0
end
local free = redis.pcall('incrby', KEYS[1], taken)
if type(free) == 'table' then
  return 0
end
redis.call('publish', KEYS[3], free)
return taken
