-- refill: ARGV[2] units (n) granted in the window ending at ARGV[3] (Unix
-- µs), living ARGV[4] µs from ARGV[7] (Unix µs on this script's clock, a
-- take's now; empty: from now) (ttl 0: join a live balance of that window
-- only); a balance started here expires from Redis ARGV[5] ms from now;
-- ARGV[6] caps a balance (gale.MaxLimit). Replies the units added.
local n, we, ttl = tonumber(ARG[2]), tonumber(ARG[3]), tonumber(ARG[4])
local since = tonumber(ARG[7]) or NOW
local b = load()
local live = b ~= nil and NOW < b.dl
if ttl == 0 and not (live and b.we == we) then
  return 0 -- join only, and no live balance of this window to join
end
if ttl > 0 and since + ttl <= NOW then
  return 0 -- dead on arrival: the window is over on this clock
end
if live and b.we > we then
  return 0 -- a stale grant: the live balance is of a later window
end
if live and b.we == we then
  local m = b.n + n
  local cap = tonumber(ARG[6])
  if m > cap then
    m = cap
  end
  call('HSET', KEY, 'n', int(m))
  return n
end
-- None, a dead balance (whose leftover is lost), or a live one of an older
-- window: this grant replaces it.
call('HSET', KEY, 'we', ARG[3], 'dl', int(since + ttl), 'n', ARG[2])
call('PEXPIRE', KEY, ARG[5])
return n
