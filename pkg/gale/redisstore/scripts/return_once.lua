-- return once: return.lua's Rule.Give of ARGV[7] units to the window ending
-- at ARGV[8] (Unix µs), at most once per marker KEYS[2] (a key in KEYS[1]'s
-- Redis Cluster slot; see once.go). Replies
--   1  given: the marker is set, lapsing at the window end, and the units
--      given back as return.lua gives them (which may change nothing);
--   2  the marker is live: given before in this window; nothing changes;
--   3  the window has ended: the units died with it; nothing changes, and
--      no marker is set (it would lapse at once).
-- The marker lapses exactly at the window end (its name holds the window
-- end), so "live" is "exists and the window has not ended": checking the
-- end first answers as checking the marker first would.
local MARKER = KEYS[2]
local credits, window_end_at = tonumber(ARG[7]), tonumber(ARG[8])
if window_end_at <= NOW then
  return 3
end
if call('EXISTS', MARKER) == 1 then
  return 2
end
-- PXAT in whole milliseconds, rounded up: the marker outlives the window by
-- under a millisecond on Redis's clock, and is never read past its end.
call('SET', MARKER, '1', 'PXAT', int(-floordiv(-window_end_at, 1000)))
give(credits, window_end_at)
return 1
