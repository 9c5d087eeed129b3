-- Renews the leases of held permits, for one guard or a batch of guards (the watchdog's), after
-- giving back each semaphore's expired permits. A guard's permits are renewed only when all of
-- them are still out: one that expired or was released elsewhere makes the guard lost. The
-- renewal also says whether somebody asked the guard to let go (revoke.lua).
--
-- KEYS[4i-3..4i]  for guard i: the semaphore's count, its zset of permit id -> expiry in epoch
--                 ms ({name}:timeout), its channel, its revocation requests
--                 (ferrisson_revoke:{name}: permit id -> requested at)
-- ARGV[1]    the lease in ms
-- ARGV[1+i]  guard i's permit ids, separated by spaces
--
-- Replies: one entry per guard: 1 renewed; 2 renewed, and a revocation of one of its permits was
-- asked for; -k not renewed (lost): k of its permits are gone.

local clock = redis.call('time')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local expiry = now + tonumber(ARGV[1])
local renewed = {}
for i = 1, #KEYS / 4 do
  local count, permits, channel, revoke = KEYS[4 * i - 3], KEYS[4 * i - 2], KEYS[4 * i - 1], KEYS[4 * i]
  local missing = 0
  local ids = {}
  for id in string.gmatch(ARGV[1 + i], '%S+') do
    ids[#ids + 1] = id
  end
  if redis.call('type', permits)['ok'] ~= 'zset' then
    missing = #ids
  else
    local back = redis.call('zremrangebyscore', permits, '-inf', now)
    if back > 0 then
      local free = redis.pcall('incrby', count, back)
      if type(free) ~= 'table' then
        redis.call('publish', channel, free)
      end
    end
    for _, id in ipairs(ids) do
      if not redis.call('zscore', permits, id) then
        missing = missing + 1
      end
    end
    if missing == 0 then
      for _, id in ipairs(ids) do
        redis.call('zadd', permits, 'xx', expiry, id)
      end
    end
  end
  if missing == 0 then
    renewed[i] = 1
    if redis.call('exists', revoke) == 1 then
      for _, id in ipairs(ids) do
        if redis.pcall('hexists', revoke, id) == 1 then
          renewed[i] = 2
          break
        end
      end
    end
  else
    renewed[i] = -missing
  end
end
return renewed
