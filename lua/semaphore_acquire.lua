-- Takes n permits of a semaphore (Redisson's RSemaphore: a string count of free permits) when
-- that many are free, and records the request so that a caller that never heard the answer can
-- give the permits back (semaphore_undo.lua).
--
-- KEYS[1]  the semaphore: a string count of free permits
-- KEYS[2]  this request's record ({name}:ferrisson_sc_request:<request-id>)
-- ARGV[1]  n, the permits wanted (at least 1)
-- ARGV[2]  how long the record lives, in ms
--
-- Replies: {1, left} taken (left: permits free now); {0, free} not enough free (nothing
-- changed); {0, -1} the request was undone already (a late delivery; nothing changed).
-- Errors: WRONGTYPE when the key holds something else than a count (nothing changed). A
-- refused command (an ACL user's) fails with Redis' own error.

if redis.call('get', KEYS[2]) == 'undone' then
  return {0, -1}
end
local free = redis.pcall('get', KEYS[1])
if type(free) == 'table' and not string.find(free.err, 'WRONGTYPE', 1, true) then
  -- Not the key's type (a refused GET, say): Redis' own error.
  return redis.error_reply(free.err)
end
if type(free) == 'table' or (free and not tonumber(free)) then
  return redis.error_reply('WRONGTYPE key ' .. KEYS[1] .. ' holds no count')
end
free = tonumber(free) or 0
local n = tonumber(ARGV[1])
if free < n then
  return {0, free}
end
redis.call('decrby', KEYS[1], n)
redis.call('set', KEYS[2], n, 'px', ARGV[2])
return {1, free - n}
