-- Takes the write hold of a read-write lock, or one more of it (reentrancy). Readers whose
-- every read hold has expired (a crashed process) no longer count: they are removed first, so a
-- live reader that keeps renewing its own holds cannot keep a dead one's holds alive.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the fencing counter of the lock's cluster slot (see lock_acquire.lua)
-- KEYS[3]  (writer preference only; absent under Redisson's policy) the waiting writers' marks,
--          a zset {name}:ferrisson_writers, owner -> server time in ms until which its mark lives
-- ARGV[1]  the owner's write field (<owner>:write)
-- ARGV[2]  lease in ms
-- ARGV[3]  owner (its read-hold field)
-- ARGV[4]  the prefix every owner's timeout keys start with ({name})
-- ARGV[5]  '1' when the client knows of no live write hold of this owner: a write hold the
--          server still has for it is stale and is replaced by a fresh grant (a new token).
--          For an acquisition nested in a hold of the owner, which must still stand on the
--          server (else the reply says it is lost, and nothing of the owner's is written): '2' in its write
--          hold; '3' (no live write hold, as '1') or '4' (a live one) in its read hold, where a
--          write is an upgrade and refused unless the owner holds the write lock too
-- ARGV[6]  (with KEYS[3]) '1' when the caller waits if refused: it then leaves or refreshes its
--          mark, which holds new readers back (see rwlock_read_acquire.lua) until
--          now + ARGV[7]; a waiting writer calls again well within that, so only a writer that
--          died or hung lets its mark run out
-- ARGV[7]  (with KEYS[3]) the mark's life in ms
-- ARGV[8]  (optional; ARGV[6] and ARGV[7] are then given, '0' without KEYS[3]) the waiter has
--          waited long enough to ask whether the holders' processes are gone
--          (lua/presence.lua): the holds of every client found gone for its grace are taken
--          out, and the write granted when none is left; a refusal's pttl is at most this many
--          ms while every holder can be looked at so
--
-- With KEYS[3], a grant takes the owner's own mark away (new readers are held back by the write
-- hold itself now). Without it, the script does exactly what it does for Redisson's policy.
--
-- Replies: {1, token} granted anew; {2, 0} one more write hold; {0, pttl} held by others (pttl -1: no TTL); {3, 0} the owner holds read holds but no
-- write hold: an upgrade would wait for itself for ever, so it is refused; {4, 0} (ARGV[5] '2',
-- '3' or '4') the hold it nests in is gone.
-- Errors: WRONGTYPE when a key holds another type; nothing is written then.

-- Redis before 7 replicates a script by its commands only when asked, before any write (a
-- grant reads the server's clock).
if redis.replicate_commands then
  redis.replicate_commands()
end
local kind = redis.call('type', KEYS[1]).ok
if kind ~= 'none' and kind ~= 'hash' then
  return redis.error_reply('WRONGTYPE key ' .. KEYS[1] .. ' holds a ' .. kind)
end
if KEYS[3] then
  local marks = redis.call('type', KEYS[3]).ok
  if marks ~= 'none' and marks ~= 'zset' then
    return redis.error_reply('WRONGTYPE key ' .. KEYS[3] .. ' holds a ' .. marks)
  end
  if redis.replicate_commands then
    redis.replicate_commands()
  end
end
local counter = redis.pcall('get', KEYS[2])
if type(counter) == 'table' or (counter and not (string.match(counter, '^%-?%d+$')
    and tonumber(counter) <= 9007199254740990)) then
  return redis.error_reply('WRONGTYPE key ' .. KEYS[2] .. ' holds no counter')
end
-- A new grant's token: the server's clock in microseconds, or the counter + 1 when the counter
-- is ahead of it; the counter ends at the token (see lock_acquire.lua).
local function new_token()
  local now = redis.call('time')
  local token = tonumber(now[1] .. string.format('%06d', now[2]))
  if counter and tonumber(counter) >= token then
    token = tonumber(counter) + 1
  end
  redis.call('set', KEYS[2], string.format('%d', token))
  return token
end

-- When to look again at holders that may be gone, if sooner than the lock's TTL (below).
local look_again
-- Refused: a waiting writer leaves or refreshes its mark (and drops the marks that ran out).
local function refused()
  local pttl = redis.call('pttl', KEYS[1])
  if look_again and (pttl == -1 or look_again < pttl) then
    pttl = look_again
  end
  if KEYS[3] and ARGV[6] == '1' then
    local time = redis.call('time')
    local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
    local life = tonumber(ARGV[7])
    redis.call('zremrangebyscore', KEYS[3], '-inf', now)
    redis.call('zadd', KEYS[3], now + life, ARGV[3])
    if redis.call('pttl', KEYS[3]) < life then
      redis.call('pexpire', KEYS[3], life)
    end
  end
  return {0, pttl}
end
-- Granted: the owner's mark, if any, goes.
local function unmark()
  if KEYS[3] then
    redis.call('zrem', KEYS[3], ARGV[3])
  end
end

local mode = redis.call('hget', KEYS[1], 'mode')
local under_read = ARGV[5] == '3' or ARGV[5] == '4'
-- The hold an acquisition nests in must stand (for a read hold, checked again below, once the
-- read holds that ran out are gone).
local function nested_gone()
  return (ARGV[5] == '2' and (mode ~= 'write' or redis.call('hexists', KEYS[1], ARGV[1]) == 0))
      or (under_read and redis.call('hexists', KEYS[1], ARGV[3]) == 0)
end
if nested_gone() then
  return {4, 0}
end
if kind == 'hash' and not mode then
  -- Another kind of lock (an RLock) holds this name.
  return refused()
end
if mode == 'read' then
  local fields = redis.call('hgetall', KEYS[1])
  for i = 1, #fields, 2 do
    local count = tonumber(fields[i + 1])
    if fields[i] ~= 'mode' and count then
      local alive = false
      for k = 1, count do
        if redis.call('exists', ARGV[4] .. ':' .. fields[i] .. ':rwlock_timeout:' .. k) == 1 then
          alive = true
          break
        end
      end
      if not alive then
        redis.call('hdel', KEYS[1], fields[i])
      end
    end
  end
  if redis.call('hlen', KEYS[1]) <= 1 then
    redis.call('del', KEYS[1])
    mode = false
  end
end
-- How soon a refusal should look again at holders that may be gone (lua/presence.lua): the
-- holds of every one found gone for its grace are taken out first.
if ARGV[8] and mode and (mode ~= 'write' or redis.call('hexists', KEYS[1], ARGV[1]) == 0) then
  local poll = tonumber(ARGV[8])
  local holders = {}
  if mode == 'write' then
    holders[1] = write_field(KEYS[1])
  else
    for _, field in ipairs(redis.call('hkeys', KEYS[1])) do
      if field ~= 'mode' and field ~= ARGV[3] then
        holders[#holders + 1] = field
      end
    end
  end
  -- A holder whose lease rules (nil): the lock's TTL tells when to look again.
  local leased = false
  for _, field in ipairs(holders) do
    local gone = rw_holder_gone(KEYS[1], ARGV[4], field, poll, ARGV[3])
    if gone == nil then
      leased = true
    elseif gone > 0 then
      look_again = math.min(look_again or gone, gone)
    end
  end
  if leased then
    look_again = nil
  end
  if redis.call('hlen', KEYS[1]) <= 1 then
    redis.call('del', KEYS[1])
    mode = false
  elseif mode == 'write' and not write_field(KEYS[1]) then
    redis.call('hset', KEYS[1], 'mode', 'read')
    mode = 'read'
  end
end

if under_read and nested_gone() then
  return {4, 0}
end
local stale = ARGV[5] == '1' or ARGV[5] == '3'

if not mode then
  local token = new_token()
  redis.call('hset', KEYS[1], 'mode', 'write', ARGV[1], 1)
  redis.call('pexpire', KEYS[1], ARGV[2])
  unmark()
  return {1, token}
end
if mode == 'write' and redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
  local reply = {2, 0}
  if stale then
    reply = {1, new_token()}
    redis.call('hset', KEYS[1], ARGV[1], 1)
  else
    redis.call('hincrby', KEYS[1], ARGV[1], 1)
  end
  if redis.call('pttl', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('pexpire', KEYS[1], ARGV[2])
  end
  unmark()
  return reply
end
if redis.call('hexists', KEYS[1], ARGV[3]) == 1 then
  return {3, 0}
end
return refused()
