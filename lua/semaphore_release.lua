-- Adds permits to a semaphore (a release, or Redisson's addPermits; negative removes) and tells
-- the waiters how many are free now, as Redisson does. Permits are not owned: nothing checks
-- who releases.
--
-- KEYS[1]  the semaphore: a string count of free permits
-- KEYS[2]  its channel (redisson_sc:{name})
-- ARGV[1]  the permits to add (may be negative)
--
-- Replies: the permits free now.
-- Errors: WRONGTYPE when the key holds something else than a count (nothing changed).

local free = redis.pcall('incrby', KEYS[1], ARGV[1])
if type(free) == 'table' then
  if string.find(free.err, 'WRONGTYPE', 1, true) or string.find(free.err, 'not an integer', 1, true) then
    return redis.error_reply('WRONGTYPE key ' .. KEYS[1] .. ' holds no count')
  end
  return redis.error_reply(free.err)
end
redis.call('publish', KEYS[2], free)
return free
