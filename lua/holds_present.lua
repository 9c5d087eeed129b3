-- Whether holds are still there: the watchdog's look every second, between renewals a third of a
-- lease apart, so that a hold somebody else removed (DEL, FLUSHALL, a forced unlock, a lease run
-- out on a frozen client) is noticed within about a second. It reads only.
--
-- KEYS[i]  a lock hash, or a permit-expirable semaphore's expiry zset
-- ARGV[i]  'f' followed by the hash field that marks the hold (the owner, <owner>:write, a
--          reader's owner); or 'p' followed by the hold's permit ids, separated by spaces, each
--          of which the zset must still have
--
-- Reply: one integer per hold, 1 where it is still there, 0 where it is gone. A key of another
-- type holds none of ours: 0, and the rest of the batch goes on.

local present = {}
for i = 1, #KEYS do
  local how, what = string.sub(ARGV[i], 1, 1), string.sub(ARGV[i], 2)
  local there = 0
  if how == 'f' then
    if redis.pcall('hexists', KEYS[i], what) == 1 then
      there = 1
    end
  elseif how == 'p' then
    there = 1
    for id in string.gmatch(what, '%S+') do
      if type(redis.pcall('zscore', KEYS[i], id)) ~= 'string' then
        there = 0
        break
      end
    end
  end
  present[i] = there
end
return present
