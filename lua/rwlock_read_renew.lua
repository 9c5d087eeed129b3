-- Extends many readers' holds at once (the watchdog's batch for read holds): only the given
-- owner's own timeout keys and the hash, so a dead reader's holds still expire; and says whether
-- somebody asked the reader to let go (a revocation request, see revoke.lua).
--
-- KEYS[3i-2]  a lock hash
-- KEYS[3i-1]  the owner's read-hold timeout prefix on that lock
-- KEYS[3i]    the lock's revocation requests (ferrisson_revoke:{name}: hold -> requested at,
--             server µs)
-- ARGV[1]     lease in ms
-- ARGV[1+i]   the owner whose read holds on KEYS[3i-2] are renewed
--
-- Replies: an array with one integer per owner, 1 where at least one of its read holds was
-- still there and was extended, the request's stamp (server µs, above 1) the same with a
-- revocation of its read holds asked for (heeded when not below the hold's grant stamp, as in
-- lock_renew.lua), 0 where it holds none (its lease is lost).

local lease = tonumber(ARGV[1])
local renewed = {}
for i = 1, #KEYS / 3 do
  local hash, prefix, revoke, owner = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i], ARGV[1 + i]
  renewed[i] = 0
  if redis.call('type', hash).ok == 'hash' then
    local holds = tonumber(redis.call('hget', hash, owner)) or 0
    for k = 1, holds do
      if redis.call('pexpire', prefix .. ':' .. k, lease) == 1 then
        renewed[i] = 1
      end
    end
    if renewed[i] == 1 and redis.call('pttl', hash) < lease then
      redis.call('pexpire', hash, lease)
    end
    if renewed[i] == 1 then
      local stamp = redis.pcall('hget', revoke, owner)
      local at = type(stamp) == 'string' and tonumber(stamp)
      if at and at > 1 then
        renewed[i] = at
      end
    end
  end
end
return renewed
