-- The floor of a release in Redisson's layout: the commands alone, for every key, with no
-- checks (benches/script_cost.rs). KEYS: the locks; ARGV[1] owner. Replies 1.
for i = 1, #KEYS do
  redis.call('hget', KEYS[i], ARGV[1])
  redis.call('del', KEYS[i])
  redis.call('publish', 'redisson_lock__channel:{' .. KEYS[i] .. '}', '0')
end
return 1
