-- Renews the leases of held permits, for one guard or a batch of guards (the watchdog's), after
-- giving back each semaphore's expired permits. A guard's permits are renewed only when all of
-- them are still out: one that expired or was released elsewhere makes the guard lost.
--
-- KEYS[3i-2], KEYS[3i-1], KEYS[3i]  for guard i: the semaphore's count, its zset of permit id ->
--                                   expiry in epoch ms ({name}:timeout), its channel
-- ARGV[1]    the lease in ms
-- ARGV[1+i]  guard i's permit ids, separated by spaces
--
-- Replies: one entry per guard: 1 renewed; -k not renewed (lost): k of its permits are gone.

local clock = redis.call('time')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local expiry = now + tonumber(ARGV[1])
local renewed = {}
for i = 1, #KEYS / 3 do
  local count, permits, channel = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i]
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
  else
    renewed[i] = -missing
  end
end
return renewed
