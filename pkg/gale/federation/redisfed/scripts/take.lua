-- take: between ARGV[2] (min) and ARGV[3] (max) units of the live balance.
-- Replies {state, granted, window end, ttl µs, balance, now}, state 0 when
-- no balance lives (and none is dead with units), 1 live, 2 dead with units
-- (the window end names it); now is the clock the take read (a refill's
-- since).
local lo, hi = tonumber(ARG[2]), tonumber(ARG[3])
local b = load()
if b == nil then
  return { 0, 0, 0, 0, 0, NOW }
end
if b.dl <= NOW then
  if b.n == 0 then
    call('DEL', KEY) -- nothing to release: forget it now
    return { 0, 0, 0, 0, 0, NOW }
  end
  return { 2, 0, b.we, 0, 0, NOW }
end
local g = 0
if b.n >= lo then
  g = b.n
  if g > hi then
    g = hi
  end
  b.n = b.n - g
  call('HSET', KEY, 'n', int(b.n)) -- keeps the key's expiry
end
return { 1, g, b.we, b.dl - NOW, b.n, NOW }
