-- check_fixed: checks of fixed windows (Rule.Take with min = max = cost),
-- one per key, in order, in one script. The composed check script's reply,
-- state and expiry for algorithm 1, without its prelude and strategy (some
-- twenty closures made on every call, which a fixed window — the algorithm
-- of envoyproxy/ratelimit's rules, so of most checks — does not need), and
-- with one script run for the whole batch a dispatcher sends: what Redis
-- spends on a script call and on TIME is shared by the checks of a batch.
--
-- KEYS[i]      the state hash of check i (fields as in prelude.lua; a fixed
--              window writes w, c and x, and p, t, r, k and u stay 0)
-- ARGV[4i-3]   its limit
-- ARGV[4i-2]   its period, µs
-- ARGV[4i-1]   its now, Unix µs; empty: Redis's clock (TIME, read once)
-- ARGV[4i]     its cost
--
-- The reply holds six numbers per check: {granted, remaining, resetAt,
-- retryAfter, windowEnd, now}. A check whose state this script cannot read
-- (not a hash, a field that is not an integer) takes nothing and answers
-- granted = -1: the store asks the composed check script, which says what is
-- wrong. TestFixedCheckMatchesComposed holds the two scripts to the same
-- replies and states.
local ARG, tonumber, call, fmod = ARGV, tonumber, redis.call, math.fmod
local single = #KEYS == 1
local server_now -- TIME, once
local out, n = {}, 0
-- No closure is made here: a function defined in the script is made anew on
-- every call, and one call is the whole cost that matters.
for i = 1, #KEYS do
  local KEY, a = KEYS[i], 4 * i - 3
  local LIMIT, PERIOD, COST = tonumber(ARG[a]), tonumber(ARG[a + 1]), tonumber(ARG[a + 3])
  local NOW = tonumber(ARG[a + 2])
  if NOW == nil then
    if server_now == nil then
      local t = call('TIME')
      server_now = tonumber(t[1]) * 1000000 + tonumber(t[2])
    end
    NOW = server_now
  end

  local granted, remaining, we, retry, now = -1, 0, 0, 0, 0
  local h = redis.pcall('HMGET', KEY, 'w', 'c', 'x')
  local w, c, x
  if not h.err then -- missing fields are 0
    w, c, x = tonumber(h[1] or 0), tonumber(h[2] or 0), tonumber(h[3] or 0)
  end
  if w and c and x and fmod(w, 1) == 0 and fmod(c, 1) == 0 and fmod(x, 1) == 0 then
    if x <= NOW then
      w, c, x = 0, 0, 0 -- expired, or none: the zero state
    end
    -- Rule.clock, then the window holding it (floorDiv: t may precede 1970).
    local t = NOW
    if t < w then
      t = w
    end
    local r = fmod(t, PERIOD)
    if r < 0 then
      r = r + PERIOD
    end
    local ws = t - r
    we, now = ws + PERIOD, NOW
    local used = 0
    if w == ws then
      used = c
    end
    local avail = LIMIT - used
    if avail < 0 then
      avail = 0
    end
    if avail < COST then -- a denial writes nothing
      granted, remaining, retry = 0, avail, we - t
    else
      used = used + COST
      if w == ws and x == we then
        -- The window's state is written and its expiry set: only the count
        -- moves, by the cost as the store wrote it.
        call('HINCRBY', KEY, 'c', ARG[a + 3])
      else
        local format = string.format
        call('HSET', KEY, 'w', format('%d', ws), 'c', format('%d', used), 'p', '0',
          't', '0', 'r', '0', 'k', '0', 'u', '0', 'x', format('%d', we))
        call('PEXPIREAT', KEY, format('%d', math.ceil(we / 1000)))
      end
      granted, remaining = COST, LIMIT - used
    end
  end
  if single then
    return { granted, remaining, we, retry, we, now }
  end
  out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5], out[n + 6] = granted, remaining, we, retry, we, now
  n = n + 6
end
return out
