-- A client's confirmation of its own presence (see lua/presence.lua and src/presence.rs), every
-- second: how many subscribers its channel has; when it has one, an absence some waiter marked
-- in its identity is cleared, so that its holds may be taken over only a whole grace after a
-- later absence is found. The client counts its holds lost a grace (less the clocks' margin)
-- after the last confirmation it sent that found a subscriber, whenever it cannot tell that its
-- subscription stands.
--
-- KEYS[1]  the client's identity, ferrisson_client:{<client uuid>}
-- ARGV[1]  its channel, ferrisson_presence:{<client uuid>}
--
-- Reply: the channel's subscribers on this server.

local subscribers = redis.call('pubsub', 'numsub', ARGV[1])[2]
if subscribers > 0 then
  redis.call('hdel', KEYS[1], 'absent_ms')
end
return subscribers
