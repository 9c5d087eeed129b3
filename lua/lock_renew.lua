-- Extends many leases at once (the watchdog's batch): each lock whose hash still has its
-- owner's field gets its TTL set to the lease again, and the renewal says whether somebody asked
-- that hold to let go (a revocation request, see revoke.lua).
--
-- KEYS[2i-1]  a lock hash
-- KEYS[2i]    its revocation requests (ferrisson_revoke:{name}: hash of hold -> requested at,
--             server µs)
-- ARGV[1]     lease in ms
-- ARGV[1+i]   the field whose presence marks the hold on KEYS[2i-1] (the owner, or <owner>:write)
--
-- Reply: an array with one integer per hold: 1 where the lease was extended, the request's stamp
-- (server µs, so above 1) where it was extended and a revocation of the owner's hold was asked
-- for (the client heeds it when the stamp is not below the hold's grant stamp: a request for an
-- earlier hold of the same owner name is stale), 0 where the owner no longer holds that lock
-- (its lease is lost). A key of another type answers 0 and is left alone, and does not stop
-- the rest of the batch.

local renewed = {}
for i = 1, #KEYS / 2 do
  local hash, revoke, field = KEYS[2 * i - 1], KEYS[2 * i], ARGV[i + 1]
  if redis.pcall('hexists', hash, field) == 1 then
    redis.call('pexpire', hash, ARGV[1])
    renewed[i] = 1
    local stamp = redis.pcall('hget', revoke, field)
    local at = type(stamp) == 'string' and tonumber(stamp)
    if at and at > 1 then
      renewed[i] = at
    end
  else
    renewed[i] = 0
  end
end
return renewed
