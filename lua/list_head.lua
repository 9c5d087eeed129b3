-- The list form of a script: several operations of one kind in one call (group commit). The
-- script of one operation, below, runs once for each, in the order given, with its own KEYS
-- and ARGV; each sees what the ones before it wrote, as if they had been sent one after another.
--
-- KEYS[]   every operation's keys, one operation's after another's
-- ARGV[]   for each operation: how many keys it has, how many arguments, then its arguments
--
-- Replies: a flat array with two entries per operation, in order: 0 and the operation's reply
-- (nil as false), or 1 and its error's message (a returned error reply, or an error raised by
-- a command it ran). An operation's error ends that operation only, as a call of its own would
-- have ended, and what it wrote before stays written; the others run as usual.
--
-- Cost: Redis's fixed cost of a script call (about 1.3 µs on Redis 7.0, against 12.5 µs for a
-- lock cycle of two calls) is paid once for the whole list, and so is TIME (below). Each
-- operation still pays for its own keys and arguments and for every redis.call it makes.

-- server_time() (lua/clock.lua when a script runs alone): one reading of the server's clock
-- serves the whole list. TIME costs Redis about 1 µs a call, as much as a small write, and a
-- list runs in well under a millisecond. A fresh grant's token is still above its slot's
-- counter, and at least the clock when the list started, so tokens keep increasing per name.
local list_clock
local function server_time()
  if not list_clock then
    list_clock = redis.call('time')
  end
  return list_clock
end

-- Then the preludes the script needs besides server_time(), and the script, as the body of
-- `local function one(KEYS, ARGV)` (src/script/call.rs puts them together).
