-- Reads everything the layout records about one object, for an operator, in one round trip,
-- and changes nothing (no write, no TTL touched: every command here is a read). Times come back
-- as offsets from the server's clock (TIME) when the script ran, so the client's clock never
-- enters into them.
--
-- KEYS[1]  the object: a lock hash, a read-write lock hash, or a semaphore's or latch's count
-- KEYS[2]  the fencing counter of the name's cluster slot (ferrisson_token:{<tag>})
-- KEYS[3]  Redisson's fencing counter of the name (redisson_lock_token:{name})
-- KEYS[4]  the lock's starving waiters (ferrisson_lock_starving:{name}), owner -> server ms
--          since which it starves
-- KEYS[5]  the fair queue (redisson_lock_queue:{name}), owners in order
-- KEYS[6]  the fair turn timeouts (redisson_lock_timeout:{name}), owner -> ms
-- KEYS[7]  the fair waiters' deadlines (ferrisson_fair_alive:{name}), owner -> server ms
-- KEYS[8]  the revocation requests (ferrisson_revoke:{name}), hold -> server µs
-- KEYS[9]  waiting writers' marks ({name}:ferrisson_writers), owner -> server ms
-- KEYS[10] the permits out of a permit-expirable semaphore ({name}:timeout), id -> epoch ms
-- ARGV[1]  what the caller takes the object for: 'lock' (plain, fair, fenced), 'rwlock',
--          'semaphore', 'permits', 'latch', or 'any' (found from the keys, see below)
-- ARGV[2]  the lock's channel (redisson_lock__channel:{name}); ':ferrisson' after it is the one
--          ferrisson's waiters listen on besides, ':<owner>' a fair waiter's own
-- ARGV[3]  the read-write lock's channel (redisson_rwlock:{name})
-- ARGV[4]  the semaphores' channel (redisson_sc:{name})
-- ARGV[5]  the latch's channel (redisson_countdownlatch__channel__{name}), '' when it hashes to
--          another slot than the name (then it is not counted)
-- ARGV[6]  what every read hold's timeout key starts with ({name}), for
--          '<p>:<owner>:rwlock_timeout:<k>'
--
-- Channels are counted with PUBSUB NUMSUB (SHARDNUMSUB in the sharded variant, on a Redis 7
-- cluster): connections subscribed, one per listening client, not one per waiter.
--
-- 'any': a hash with a 'mode' field is a read-write lock, any other hash a lock; a string is the
-- count of a permit-expirable semaphore when its permits zset exists, else 'count' (a semaphore
-- and a latch look alike); no key: a lock when a fair queue or timeouts exist or the name has a
-- fenced lock's counter, a read-write lock when writers' marks exist, a permit-expirable
-- semaphore when its permits zset exists, else 'none'.
--
-- Replies: {kind, section}, the section by kind (offsets in ms unless said, negative when the
-- time has passed; false where a value is absent):
--   'lock'       {pttl, {owner, holds, ...}, slot counter, name counter,
--                 {subscribers, ferrisson's subscribers},
--                 {{owner, turn offset, alive offset, subscribers of its channel}, ...} (queue),
--                 {owner, offset since it starves, ...}, {hold, µs since requested, ...}}
--   'rwlock'     {pttl, mode, {owner, write holds} or {}, {{owner, holds, {pttl of hold 1,
--                 2, ...}}, ...}, {owner, mark offset, ...}, {hold, µs since requested, ...},
--                 subscribers, slot counter}
--   'semaphore'  {count, subscribers}
--   'latch'      {count, subscribers}
--   'permits'    {count, {id, expiry offset, ...}, {hold, µs since requested, ...}, subscribers}
--   'count'      {count, semaphore channel's subscribers, latch channel's subscribers}
--   'none'       {lock's, read-write lock's, semaphores', latch's subscribers}
-- pttl: -2 when the key is absent, -1 without TTL. A read hold's pttl is -2 when its timeout key
-- is gone. Counts and counters come back as the strings stored.
-- Errors: WRONGTYPE when a key the kind uses holds another type, or the object is another kind
-- of lock (a read-write lock taken for a lock or the other way round), or a count or counter is
-- no integer. Nothing changed then either.

local clock = redis.call('time')
local now_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
-- Exact as a Lua number: about 1.8e15, below 2^53.
local now_us = tonumber(clock[1]) * 1000000 + tonumber(clock[2])

local kinds = {}
for i = 1, #KEYS do
  kinds[i] = redis.call('type', KEYS[i]).ok
end

-- The keys each kind reads, with their types.
local uses = {
  lock = {{1, 'hash'}, {2, 'string'}, {3, 'string'}, {4, 'zset'}, {5, 'list'}, {6, 'zset'},
    {7, 'zset'}, {8, 'hash'}},
  rwlock = {{1, 'hash'}, {2, 'string'}, {8, 'hash'}, {9, 'zset'}},
  semaphore = {{1, 'string'}},
  latch = {{1, 'string'}},
  permits = {{1, 'string'}, {8, 'hash'}, {10, 'zset'}},
  count = {{1, 'string'}, {10, 'zset'}},
}

local function present(i)
  return kinds[i] ~= 'none'
end

local asked = ARGV[1]
if asked == 'any' then
  if kinds[1] == 'hash' then
    asked = redis.call('hexists', KEYS[1], 'mode') == 1 and 'rwlock' or 'lock'
  elseif kinds[1] == 'string' then
    asked = present(10) and 'permits' or 'count'
  elseif kinds[1] ~= 'none' then
    return redis.error_reply('WRONGTYPE key ' .. KEYS[1] .. ' holds a ' .. kinds[1])
  elseif present(5) or present(6) or present(3) then
    asked = 'lock'
  elseif present(9) then
    asked = 'rwlock'
  elseif present(10) then
    asked = 'permits'
  else
    asked = 'none'
  end
end

for _, key in ipairs(uses[asked] or {}) do
  local kind = kinds[key[1]]
  if kind ~= 'none' and kind ~= key[2] then
    return redis.error_reply('WRONGTYPE key ' .. KEYS[key[1]] .. ' holds a ' .. kind)
  end
end
if asked == 'lock' or asked == 'rwlock' then
  local rw = present(1) and redis.call('hexists', KEYS[1], 'mode') == 1
  if asked == 'lock' and rw then
    return redis.error_reply('WRONGTYPE key ' .. KEYS[1] .. ' holds a read-write lock')
  end
  if asked == 'rwlock' and present(1) and not rw then
    return redis.error_reply('WRONGTYPE key ' .. KEYS[1] .. ' holds a lock')
  end
end

-- The value of a string key, false when absent; refused unless it is an integer.
local function integer(i, signed)
  local value = redis.call('get', KEYS[i])
  if value and not string.match(value, signed and '^%-?%d+$' or '^%d+$') then
    return nil, redis.error_reply('WRONGTYPE key ' .. KEYS[i] .. ' holds no integer')
  end
  return value
end

-- Subscribers of each channel, in order (PUBSUB NUMSUB takes a hundred at a time, well within
-- Lua's limit on unpacked arguments).
local function numsub(channels)
  local counts = {}
  for first = 1, #channels, 100 do
    local last = math.min(first + 99, #channels)
    local reply = redis.call('pubsub', 'numsub', unpack(channels, first, last))
    for i = 2, #reply, 2 do
      counts[#counts + 1] = reply[i]
    end
  end
  return counts
end

-- A zset as {member, score - now_ms, ...}.
local function offsets(i)
  local flat = {}
  if not present(i) then
    return flat
  end
  local scored = redis.call('zrange', KEYS[i], 0, -1, 'withscores')
  for j = 1, #scored, 2 do
    flat[#flat + 1] = scored[j]
    flat[#flat + 1] = tonumber(scored[j + 1]) - now_ms
  end
  return flat
end

-- The revocation requests as {hold, µs since requested, ...}.
local function revocations()
  local flat = {}
  if not present(8) then
    return flat
  end
  local marks = redis.call('hgetall', KEYS[8])
  for j = 1, #marks, 2 do
    flat[#flat + 1] = marks[j]
    flat[#flat + 1] = now_us - (tonumber(marks[j + 1]) or now_us)
  end
  return flat
end

local function pttl()
  return redis.call('pttl', KEYS[1])
end

if asked == 'lock' then
  local holders = present(1) and redis.call('hgetall', KEYS[1]) or {}
  local slot, err = integer(2)
  if err then return err end
  local named, err2 = integer(3)
  if err2 then return err2 end
  local queue = present(5) and redis.call('lrange', KEYS[5], 0, -1) or {}
  local channels = {ARGV[2], ARGV[2] .. ':ferrisson'}
  for _, owner in ipairs(queue) do
    channels[#channels + 1] = ARGV[2] .. ':' .. owner
  end
  local counts = numsub(channels)
  local waiters = {}
  for j, owner in ipairs(queue) do
    local turn = present(6) and redis.call('zscore', KEYS[6], owner)
    local alive = present(7) and redis.call('zscore', KEYS[7], owner)
    waiters[j] = {owner, turn and tonumber(turn) - now_ms, alive and tonumber(alive) - now_ms,
      counts[j + 2]}
  end
  return {'lock', {pttl(), holders, slot or false, named or false, {counts[1], counts[2]},
    waiters, offsets(4), revocations()}}
end

if asked == 'rwlock' then
  local mode = present(1) and redis.call('hget', KEYS[1], 'mode')
  local writer = {}
  local readers = {}
  local fields = present(1) and redis.call('hgetall', KEYS[1]) or {}
  for j = 1, #fields, 2 do
    local field, value = fields[j], fields[j + 1]
    if field ~= 'mode' then
      if string.sub(field, -6) == ':write' then
        writer = {string.sub(field, 1, -7), value}
      else
        -- One timeout key per read hold (Redisson's layout); a count past 10,000 is no lock
        -- ferrisson or Redisson made, and is not walked further.
        local leases = {}
        for k = 1, math.min(tonumber(value) or 0, 10000) do
          leases[k] = redis.call('pttl', ARGV[6] .. ':' .. field .. ':rwlock_timeout:' .. k)
        end
        readers[#readers + 1] = {field, value, leases}
      end
    end
  end
  local slot, err = integer(2)
  if err then return err end
  return {'rwlock', {pttl(), mode or false, writer, readers, offsets(9), revocations(),
    numsub({ARGV[3]})[1], slot or false}}
end

local function latch_subscribers()
  if ARGV[5] == '' then
    return 0
  end
  return numsub({ARGV[5]})[1]
end

if asked == 'semaphore' or asked == 'latch' or asked == 'permits' or asked == 'count' then
  local count, err = integer(1, true)
  if err then return err end
  if asked == 'semaphore' then
    return {'semaphore', {count or false, numsub({ARGV[4]})[1]}}
  elseif asked == 'latch' then
    return {'latch', {count or false, latch_subscribers()}}
  elseif asked == 'permits' then
    return {'permits', {count or false, offsets(10), revocations(), numsub({ARGV[4]})[1]}}
  end
  return {'count', {count, numsub({ARGV[4]})[1], latch_subscribers()}}
end

if asked == 'none' then
  local counts = numsub({ARGV[2], ARGV[3], ARGV[4]})
  return {'none', {counts[1], counts[2], counts[3], latch_subscribers()}}
end
return redis.error_reply('ERR inspect.lua: unknown kind ' .. tostring(ARGV[1]))
