-- Frees a lock whoever holds it, and wakes its waiters.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the lock's channel; for a fair lock, its waiters' channel prefix
-- KEYS[3]  (fair locks only) the queue: the message then goes to its head, '<prefix>:<head>'
-- ARGV[1]  the message published when a held lock was freed ('0')
--
-- Reply: 1 when a held lock was deleted, 0 when it was free.
-- Errors: WRONGTYPE when the key holds another type (nothing changed).

local kind = redis.call('type', KEYS[1]).ok
if kind == 'none' then
  return 0
end
if kind ~= 'hash' then
  return redis.error_reply('WRONGTYPE key ' .. KEYS[1] .. ' holds a ' .. kind)
end
redis.call('del', KEYS[1])
if KEYS[3] then
  local head = redis.pcall('lindex', KEYS[3], 0)
  if type(head) == 'string' then
    redis.call('publish', KEYS[2] .. ':' .. head, ARGV[1])
  end
else
  redis.call('publish', KEYS[2], ARGV[1])
end
return 1
