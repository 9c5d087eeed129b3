-- server_time(): the server's clock (TIME), for the lock scripts that have a list form. Put
-- before such a script when it runs alone; its list form (list_head.lua) defines it instead,
-- reading the clock once for the whole list.
local function server_time()
  return redis.call('time')
end

