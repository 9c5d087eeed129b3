-- Takes a read hold of a read-write lock: shared with other readers, and with the owner's own
-- write hold (write->read reentry). Each read hold gets its own timeout key with its own lease;
-- the hash lives as long as the longest of them.
--
-- KEYS[1]  the lock: hash, 'mode' -> read|write, <owner> -> read holds, <owner>:write -> write holds
-- KEYS[2]  this owner's read-hold timeout prefix ({name}:<owner>:rwlock_timeout); hold k is ':k'
-- KEYS[3]  the fencing counter of the lock's cluster slot (see lock_acquire.lua)
-- KEYS[4]  (writer preference only; absent under Redisson's policy) the waiting writers' marks,
--          a zset {name}:ferrisson_writers, owner -> server time in ms until which its mark lives
-- ARGV[1]  owner
-- ARGV[2]  the owner's write field (<owner>:write)
-- ARGV[3]  lease in ms
-- ARGV[4]  '1' when the client knows of no live read hold of this owner: read holds the server
--          still has for it are stale and are dropped before a fresh grant (a new token).
--          For an acquisition nested in a hold of the owner, which must still stand on the
--          server (else the reply says it is lost and nothing is written): '2' in its read
--          hold; '3' in its write hold, with no live read hold (read holds the server has are
--          stale, as with '1'); '4' in its write hold, with live read holds. A read nested in
--          the write hold draws no token: it carries the write hold's (the client has it).
-- ARGV[5]  (optional) the waiter has waited long enough to ask whether the writer's process is
--          gone (lua/presence.lua): the holds of a client found gone for its grace are taken
--          out and the read granted; a refusal's pttl is at most this many ms while the writer
--          can be looked at so
--
-- With KEYS[4], a new reader is refused while a waiting writer's mark lives, so the writer gets
-- in once the readers inside have left. An owner with live read holds (the client says so: ARGV[4]
-- is '0') or with the write hold still enters: it may be inside its critical section, and making
-- it wait for a writer that waits for it would deadlock both. Without KEYS[4] the script does
-- exactly what it does for Redisson's policy, and never reads the marks.
--
-- Replies: {1, token} the owner's first read hold; {5, clock} its first under its own write hold
-- (no token drawn: the hold carries the write hold's; the server clock in µs stamps the grant);
-- {2, 0} one more; {4, 0} (ARGV[4] '2', '3' or '4') the hold it nests in is gone; {0, pttl}
-- write-locked by another owner (pttl -1: no TTL), or, with KEYS[4], a writer's mark holds new
-- readers back (pttl: how long the longest-living mark lives unless its writer calls again).
-- Errors: WRONGTYPE when a key holds another type; nothing is written then.

local kind = redis.call('type', KEYS[1]).ok
if kind ~= 'none' and kind ~= 'hash' then
  return redis.error_reply('WRONGTYPE key ' .. KEYS[1] .. ' holds a ' .. kind)
end
local counter = redis.pcall('get', KEYS[3])
if type(counter) == 'table' or (counter and not (string.match(counter, '^%-?%d+$')
    and tonumber(counter) <= 9007199254740990)) then
  return redis.error_reply('WRONGTYPE key ' .. KEYS[3] .. ' holds no counter')
end

local mode = redis.call('hget', KEYS[1], 'mode')
local under_write = ARGV[4] == '3' or ARGV[4] == '4'
if (ARGV[4] == '2' and redis.call('hexists', KEYS[1], ARGV[1]) == 0)
    or (under_write and (mode ~= 'write' or redis.call('hexists', KEYS[1], ARGV[2]) == 0)) then
  return {4, 0}
end
if kind == 'hash' and not mode then
  -- Another kind of lock (an RLock) holds this name.
  return {0, redis.call('pttl', KEYS[1])}
end
if mode == 'write' and redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
  local pttl = redis.call('pttl', KEYS[1])
  local writer = ARGV[5] and write_field(KEYS[1])
  -- The prefix of every owner's timeout keys: this owner's, less ':<owner>:rwlock_timeout'.
  local base = string.sub(KEYS[2], 1, #KEYS[2] - #ARGV[1] - 16)
  local gone = writer and rw_holder_gone(KEYS[1], base, writer, tonumber(ARGV[5]), ARGV[1])
  if gone ~= 0 then
    if gone and (pttl == -1 or gone < pttl) then
      pttl = gone
    end
    return {0, pttl}
  end
  -- The writer's process is gone: its holds were taken out; the lock is free.
  redis.call('del', KEYS[1])
  mode = false
end
if KEYS[4] and mode ~= 'write' then
  -- (mode 'write' here means the owner holds the write hold: write->read reentry.)
  local marks = redis.call('type', KEYS[4]).ok
  if marks ~= 'none' and marks ~= 'zset' then
    return redis.error_reply('WRONGTYPE key ' .. KEYS[4] .. ' holds a ' .. marks)
  end
  local reading = ARGV[4] ~= '1' and redis.call('hexists', KEYS[1], ARGV[1]) == 1
  if marks == 'zset' and not reading then
    if redis.replicate_commands then
      redis.replicate_commands()
    end
    local time = redis.call('time')
    local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
    local last = redis.call('zrevrangebyscore', KEYS[4], '+inf', '(' .. now, 'withscores', 'limit', 0, 1)
    if last[2] then
      return {0, math.max(1, tonumber(last[2]) - now)}
    end
  end
end

-- The counter's SET is the first write: if the server refuses writes (OOM, READONLY), nothing
-- changes.
local stale = (ARGV[4] == '1' or ARGV[4] == '3') and tonumber(redis.call('hget', KEYS[1], ARGV[1]))
local reply = {2, 0}
if stale or redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  -- Redis before 7 replicates a script by its commands only when asked, before any write.
  if redis.replicate_commands then
    redis.replicate_commands()
  end
  local now = redis.call('time')
  local clock = tonumber(now[1] .. string.format('%06d', now[2]))
  if under_write then
    -- No token: the hold carries the write hold's. The clock stamps the grant, for
    -- revocation requests (a request made before this hold never reaches it).
    reply = {5, clock}
  else
    -- The token: the server's clock in microseconds, or the counter + 1 when the counter is
    -- ahead of it; the counter ends at the token (see lock_acquire.lua).
    local token = clock
    if counter and tonumber(counter) >= token then
      token = tonumber(counter) + 1
    end
    redis.call('set', KEYS[3], string.format('%d', token))
    reply = {1, token}
  end
end
if stale then
  for k = 1, stale do
    redis.call('del', KEYS[2] .. ':' .. k)
  end
  redis.call('hdel', KEYS[1], ARGV[1])
end
local holds = redis.call('hincrby', KEYS[1], ARGV[1], 1)
if not mode then
  redis.call('hset', KEYS[1], 'mode', 'read')
end
redis.call('set', KEYS[2] .. ':' .. holds, 1, 'px', ARGV[3])
if redis.call('pttl', KEYS[1]) < tonumber(ARGV[3]) then
  redis.call('pexpire', KEYS[1], ARGV[3])
end
return reply
