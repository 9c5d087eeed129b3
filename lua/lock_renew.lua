-- Extends many leases at once (the watchdog's batch): each lock whose hash still has its
-- owner's field gets its TTL set to the lease again.
--
-- KEYS[1..n]  lock hashes
-- ARGV[1]     lease in ms
-- ARGV[1+i]   the field whose presence marks the hold on KEYS[i] (the owner, or <owner>:write)
--
-- Reply: an array of n integers, 1 where the lease was extended, 0 where the owner no longer
-- holds that lock (its lease is lost). A key of another type answers 0 and is left alone, and
-- does not stop the rest of the batch.

local renewed = {}
for i = 1, #KEYS do
  if redis.pcall('hexists', KEYS[i], ARGV[i + 1]) == 1 then
    redis.call('pexpire', KEYS[i], ARGV[1])
    renewed[i] = 1
  else
    renewed[i] = 0
  end
end
return renewed
