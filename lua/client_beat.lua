-- The heartbeat's refresh of a client's identity (see src/identity.rs) when what it says of the
-- client's holds and self-waits, or the TTL it needs, changed: keeps the identity alive and sets those fields, only
-- while it is there. A hash set without its other fields and its TTL would list a dead client
-- for ever; an identity found gone is written whole instead (client_identity.lua).
--
-- KEYS[1]  the identity, ferrisson_client:{<client uuid>}
-- ARGV[1]  the TTL, in ms
-- ARGV[2..] field, value, field, value, ...: the fields to set (beat_ttl_ms among them when the
--          TTL differs from the last beat's)
--
-- Reply: 1 when the identity was there (kept and set), 0 when it is gone (nothing written).

if redis.call('pexpire', KEYS[1], ARGV[1]) == 0 then
  return 0
end
if #ARGV > 1 then
  redis.call('hset', KEYS[1], unpack(ARGV, 2))
end
return 1
