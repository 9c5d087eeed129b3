-- holder_gone(owner, poll, me): put before the acquire scripts (see src/presence/mod.rs). Whether a hold
-- of `owner` (a field '<client uuid>:<n>', or '<client uuid>:<n>:write') that keeps the caller
-- out belongs to a ferrisson client whose process is gone, so that the hold may be taken over
-- instead of waiting out its lease.
--
-- A ferrisson client that announces its presence keeps a subscription to its own channel,
-- ferrisson_presence:{<uuid>}, and says in its identity (ferrisson_client:{<uuid>}, field
-- presence_grace_ms) for how long its holds may be taken over after that channel is found
-- without a subscriber. The kernel closes a dead process's connections at once, so Redis drops
-- the subscription with it. The first caller to find the channel empty marks the time
-- (absent_ms); whoever finds it empty once the grace has passed since the mark takes the hold
-- over. Whoever finds a subscriber clears the mark, and so does the client itself every half
-- second while it holds anything (`PUBSUB NUMSUB` of its channel, then `HDEL` of the mark; see
-- src/presence/mod.rs): the client counts its holds lost a grace after the last such
-- confirmation it sent, less a margin for the clocks, whenever it cannot tell that its
-- subscription stands.
--
-- The identity and the channel are not the script's keys: this runs on one server (alone, or a
-- sentinel's master) only, never on a cluster, where channels are counted per node. A caller
-- whose ACL user may not read or write the identity gets nil (the lease rule).
--
-- Returns nil when the owner is no such client (another library's, or one without presence),
-- or a client of the caller's own (`me`, the caller's owner name): its lease rules. Else how many ms until the caller should look again: 0 when the hold may be
-- taken over now; the rest of the grace when the channel is empty; `poll` while it has a
-- subscriber.
local function holder_gone(owner, poll, me)
  local id = string.match(owner, '^(%x%x%x%x%x%x%x%x%-%x%x%x%x%-%x%x%x%x%-%x%x%x%x%-%x%x%x%x%x%x%x%x%x%x%x%x):')
  -- The caller's own client holds it: alive, whatever its channel says.
  if not id or id == string.sub(me, 1, 36) then
    return nil
  end
  -- Redis before 7 replicates a script by its commands only when asked, before any write (the
  -- mark, or the caller's takeover).
  if redis.replicate_commands then
    redis.replicate_commands()
  end
  local identity = 'ferrisson_client:{' .. id .. '}'
  local seen = redis.pcall('hmget', identity, 'presence_grace_ms', 'absent_ms')
  local grace = type(seen) == 'table' and not seen.err and tonumber(seen[1])
  if not grace then
    return nil
  end
  if redis.call('pubsub', 'numsub', 'ferrisson_presence:{' .. id .. '}')[2] > 0 then
    if seen[2] then
      redis.pcall('hdel', identity, 'absent_ms')
    end
    return poll
  end
  local time = redis.call('time')
  local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  local since = tonumber(seen[2])
  if not since then
    -- Refused (an ACL user that may only read identities): this caller cannot start the
    -- count; another may.
    if type(redis.pcall('hset', identity, 'absent_ms', now)) ~= 'number' then
      return nil
    end
    return grace
  end
  return math.max(since + grace - now, 0)
end

