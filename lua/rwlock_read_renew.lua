-- Extends many readers' holds at once (the watchdog's batch for read holds): only the given
-- owner's own timeout keys and the hash, so a dead reader's holds still expire.
--
-- KEYS[2i-1]  a lock hash
-- KEYS[2i]    the owner's read-hold timeout prefix on that lock
-- ARGV[1]     lease in ms
-- ARGV[1+i]   the owner whose read holds on KEYS[2i-1] are renewed
--
-- Replies: an array with one integer per owner, 1 where at least one of its read holds was
-- still there and was extended, 0 where it holds none (its lease is lost).

local lease = tonumber(ARGV[1])
local renewed = {}
for i = 1, #KEYS / 2 do
  local hash, prefix = KEYS[2 * i - 1], KEYS[2 * i]
  renewed[i] = 0
  if redis.call('type', hash).ok == 'hash' then
    local holds = tonumber(redis.call('hget', hash, ARGV[1 + i])) or 0
    for k = 1, holds do
      if redis.call('pexpire', prefix .. ':' .. k, lease) == 1 then
        renewed[i] = 1
      end
    end
    if renewed[i] == 1 and redis.call('pttl', hash) < lease then
      redis.call('pexpire', hash, lease)
    end
  end
end
return renewed
