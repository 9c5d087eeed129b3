-- Takes an RLock, or one more hold of it for its owner (reentrancy).
--
-- KEYS[1]  the lock: a hash, field <owner> -> hold count, PEXPIRE = lease
-- KEYS[2]  the fencing counter of the lock's cluster slot (ferrisson_token:{<tag>}, never expires)
-- KEYS[3]  (starving waiters and fenced locks) the lock's starving waiters,
--          ferrisson_lock_starving:{name}: a zset owner -> server time (ms) it first said so
-- KEYS[4]  (fenced locks only) Redisson's counter of the lock name, redisson_lock_token:{name}
-- ARGV[1]  owner (<client-uuid>:<n>)
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  '1' when the client knows of no live hold of this owner: a hold the server still has
--          for it is stale (a release or repair whose outcome never reached the client) and is
--          replaced by a fresh grant, so a new guard never carries an old token; '2' for an
--          acquisition nested in the owner's hold: one more hold of it, and only while the
--          server still has it (a hold forced open or deleted is never granted afresh under
--          the old owner: the reply says it is lost)
-- ARGV[4]  (optional) '1' when the owner has waited past the client's starvation threshold
-- ARGV[5]  (with ARGV[4]) how long the starving set lives without a new entry, in ms
-- ARGV[6]  (optional; ARGV[4] and ARGV[5] are then given, '0' when not starving) the waiter has
--          waited long enough to ask whether the holder's process is gone (lua/presence.lua):
--          a hold of a client found gone for its grace is taken over (a fresh grant), and a
--          refusal's pttl is at most this many ms while the holder can be looked at so
----
-- Starving: refused, the owner joins the starving set (keeping the time it first joined), and
-- the next release hands the lock to the set's oldest entry (lock_release.lua); granted, it
-- leaves the set. A provisional hold handed so is a hold the client does not know of, so the
-- waiter's next acquire (ARGV[3] = '1') replaces it by a fresh grant with a token.
--
-- Tokens: a new grant's token is above the slot's counter (and, for a fenced lock, the name's
-- counter) and at least the server's clock in microseconds; the counters end at the token.
-- Every earlier grant of the name left the slot's counter at least at its token, so tokens
-- increase per name, and a Java RFencedLock counting on the name's counter stays in one
-- sequence with the fenced lock.
--
-- Clock: server_time() is TIME, defined by lua/clock.lua, which runs before this script, or
-- by the list form's head (lua/list_head.lua), which reads it once for a whole list.
--
-- Replies: one integer. A {status, value} table costs Redis about 0.4 µs more a call than an
-- integer (building the table, converting it, a reply of deferred length) and the client an
-- allocation; the other lock kinds keep the table.
--   token >= 1  granted anew
--   0           granted again to the owner that holds it (TTL reset to the lease); the hold keeps
--               the token of its first grant
--   -2 - pttl   held by another owner; pttl is the lock's remaining TTL in ms, -1 without TTL
--               (so -1: no TTL; -2 - n: n ms left); with ARGV[6], when to look again, if sooner
--   {4, 0}      (ARGV[3] = '2' only) the owner holds nothing here: the hold the acquisition
--               nests in is gone; nothing was written
-- Errors: WRONGTYPE when a key holds another type. The lock is never changed then (the
-- counter's SET is the first write: a server refusing writes refuses it); the slot's counter
-- may have moved up to the clock, which costs no guarantee.

-- Cost: every redis.call costs Redis about as much as the command itself again, and each
-- closure a run defines is an allocation, so the common paths are straight-line code: a free
-- lock is PTTL, TIME, SET .. GET, HSET, PEXPIRE; a busy one PTTL, HEXISTS (BENCHMARKS.md,
-- notes).

local pttl = redis.call('pttl', KEYS[1])
if pttl ~= -2 then
  local mine = redis.pcall('hexists', KEYS[1], ARGV[1])
  if type(mine) == 'table' then
    return redis.error_reply('WRONGTYPE key ' .. KEYS[1] .. ' holds a ' .. redis.call('type', KEYS[1]).ok)
  end
  if mine == 0 then
    if ARGV[3] == '2' then
      return {4, 0}
    end
    -- An RLock's hash has one field, its holder (a hash of more is another kind's: left alone).
    local fields = ARGV[6] and redis.call('hkeys', KEYS[1])
    local gone = fields and #fields == 1 and holder_gone(fields[1], tonumber(ARGV[6]), ARGV[1])
    if gone == 0 then
      -- The holder's process is gone: its hold is taken over (a grant below).
      redis.call('del', KEYS[1])
    else
      if gone and (pttl == -1 or gone < pttl) then
        pttl = gone
      end
      if ARGV[4] == '1' then
        -- Errors (a key of another type) are ignored: the owner just waits unmarked.
        if redis.replicate_commands then
          redis.replicate_commands()
        end
        local now = server_time()
        redis.pcall('zadd', KEYS[3], 'nx', now[1] * 1000 + math.floor(now[2] / 1000), ARGV[1])
        redis.pcall('pexpire', KEYS[3], ARGV[5])
      end
      return -2 - pttl
    end
  elseif ARGV[3] ~= '1' then
    redis.call('hincrby', KEYS[1], ARGV[1], 1)
    redis.call('pexpire', KEYS[1], ARGV[2])
    return 0
  end
end
if ARGV[3] == '2' then
  return {4, 0}
end

-- A new grant (the lock is free, or holds a stale hold of this owner). Its token is the
-- server's clock in microseconds, or the slot's counter + 1 when the counter is ahead of it
-- (grants faster than one a microsecond, a clock stepped back); the counter ends at the token.
-- So a counter Redis lost (a restart without persistence, a failover to a replica that missed
-- it, DEL, FLUSHALL, eviction) restarts above every token handed out before, provided the
-- clock of the master now is not behind the clock of the master then by more than the time
-- between the two grants. TIME's seconds and microseconds are joined as text: the number stays
-- exact (16 digits, below 2^53 until the year 2255), and a Lua number would print as 1.7e+15.
-- Redis before 7 replicates a script by its commands only when asked, before any write.
if redis.replicate_commands then
  redis.replicate_commands()
end
local now = server_time()
local clock = now[1] .. string.format('%06d', now[2])
local seen = redis.pcall('set', KEYS[2], clock, 'get')
if type(seen) == 'table' then
  if string.find(seen.err, 'WRONGTYPE', 1, true) then
    return redis.error_reply('WRONGTYPE key ' .. KEYS[2] .. ' holds no counter')
  end
  -- Refused (OOM, READONLY): nothing was written.
  return redis.error_reply(seen.err)
end
local token = tonumber(clock)
if seen then
  -- Only a whole number that stays exact as a Lua number (below 2^53) is a counter: anything
  -- else is put back and refused, as INCR would refuse it.
  local last = string.match(seen, '^%-?%d+$') and tonumber(seen)
  if not last or last > 9007199254740990 then
    redis.call('set', KEYS[2], seen)
    return redis.error_reply('WRONGTYPE key ' .. KEYS[2] .. ' holds no counter')
  end
  if last >= token then
    token = last + 1
    redis.call('set', KEYS[2], string.format('%d', token))
  end
end
if KEYS[4] then
  -- Redisson's counter of the name (a Java RFencedLock takes its tokens there by INCR): the
  -- token goes above it too, and it ends at the token, so Java's next token is above ours.
  local named = redis.pcall('get', KEYS[4])
  if type(named) == 'table'
      or (named and not (string.match(named, '^%-?%d+$') and tonumber(named) <= 9007199254740990)) then
    return redis.error_reply('WRONGTYPE key ' .. KEYS[4] .. ' holds no counter')
  end
  if named and tonumber(named) >= token then
    token = tonumber(named) + 1
    redis.call('set', KEYS[2], string.format('%d', token))
  end
  redis.call('set', KEYS[4], string.format('%d', token))
end
if ARGV[4] == '1' then
  redis.pcall('zrem', KEYS[3], ARGV[1])
end
redis.call('hset', KEYS[1], ARGV[1], 1)
redis.call('pexpire', KEYS[1], ARGV[2])
return token
