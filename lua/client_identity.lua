-- Writes a client's identity whole (see src/identity.rs), with its TTL: when the client connects,
-- and when its heartbeat finds the key gone (a restarted or emptied server). One script, so the
-- hash never lives without its TTL, which would keep a dead client listed for ever.
--
-- KEYS[1]  the identity, ferrisson_client:{<client uuid>}
-- ARGV[1]  the TTL, in ms, also recorded as the field beat_ttl_ms (a reader's PTTL tells from it
--          how long ago the client last wrote or beat)
-- ARGV[2]  when the client started, server unix ms, as the first write stamped it; '' at the
--          first write, which stamps the server's clock now
-- ARGV[3..] field, value, field, value, ...: what the client says of itself
--
-- Reply: the start written (server unix ms), as a string.

local started = ARGV[2]
if started == '' then
  local clock = redis.call('time')
  -- Joined as text: exact, whatever Lua's numbers would print.
  started = clock[1] .. string.format('%03d', math.floor(tonumber(clock[2]) / 1000))
end
redis.call('hset', KEYS[1], 'started', started, 'beat_ttl_ms', ARGV[1], unpack(ARGV, 3))
redis.call('pexpire', KEYS[1], ARGV[1])
return started
