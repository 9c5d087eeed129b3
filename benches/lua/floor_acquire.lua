-- The floor of an acquire in Redisson's layout with tokens: the commands alone, for every key,
-- with no checks, and one clock reading for the call as a list reads it (benches/script_cost.rs).
-- KEYS: the locks; ARGV[1] owner, ARGV[2] lease in ms. Replies 1.
local now = redis.call('time')
for i = 1, #KEYS do
  redis.call('pttl', KEYS[i])
  redis.call('set', 'ferrisson_token:{floor}', now[1], 'get')
  redis.call('hset', KEYS[i], ARGV[1], 1)
  redis.call('pexpire', KEYS[i], ARGV[2])
end
return 1
