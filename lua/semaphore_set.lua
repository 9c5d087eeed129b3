-- Sets a semaphore's permits, only when it has none set (Redisson's trySetPermits), or takes
-- every free permit (drainPermits).
--
-- KEYS[1]  the semaphore: a string count of free permits
-- KEYS[2]  its channel (redisson_sc:{name})
-- ARGV[1]  'set' with ARGV[2] the permits, or 'drain'
--
-- Replies: for 'set', 1 when set, 0 when permits were set already (nothing changed); for
-- 'drain', the permits taken (0 when none were free).
-- Errors: WRONGTYPE when the key holds something else than a count (nothing changed). A
-- refused command (an ACL user's) fails with Redis' own error.

local free = redis.pcall('get', KEYS[1])
if type(free) == 'table' and not string.find(free.err, 'WRONGTYPE', 1, true) then
  -- Not the key's type (a refused GET, say): Redis' own error.
  return redis.error_reply(free.err)
end
if type(free) == 'table' or (free and not tonumber(free)) then
  return redis.error_reply('WRONGTYPE key ' .. KEYS[1] .. ' holds no count')
end
if ARGV[1] == 'set' then
  if free then
    return 0
  end
  redis.call('set', KEYS[1], ARGV[2])
  redis.call('publish', KEYS[2], ARGV[2])
  return 1
end
free = tonumber(free) or 0
if free <= 0 then
  return 0
end
redis.call('set', KEYS[1], 0)
return free
