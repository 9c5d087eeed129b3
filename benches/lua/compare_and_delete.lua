-- rslock's release pattern, for comparison (benches/script_cost.rs): deletes KEYS[1] when it
-- holds ARGV[1]. Replies 1 when deleted, else 0.
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1])
end
return 0
