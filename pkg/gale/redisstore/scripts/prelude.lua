-- The prelude of every script (then window.lua, strategy.lua and the
-- operation's own file): the arguments, and the state in its hash.
--
-- KEYS[1]  the state hash: w Window, c Used, p Prev, t TAT, r Rate, k Tokens,
--          u Refilled, x ExpireAt (the state is the zero State from x on)
-- ARGV[1]  algorithm (1 fixed, 2 sliding, 3 GCRA, 4 token bucket, 5 quota)
-- ARGV[2]  limit
-- ARGV[3]  period, µs (0 for quota)
-- ARGV[4]  burst (0 means limit)
-- ARGV[5]  calendar (1 day, 2 week, 3 month, 4 year; 0 unless quota)
-- ARGV[6]  now, Unix µs; empty: read the server's clock (TIME)
-- ARGV[7…] the operation's own arguments

-- Library functions as locals: a local is one register read, a global a
-- table lookup.
local floor, ceil, fmod = math.floor, math.ceil, math.fmod
local format, tonumber, call = string.format, tonumber, redis.call
local KEY, ARG = KEYS[1], ARGV

local ALG = tonumber(ARG[1])
local LIMIT = tonumber(ARG[2])
local PERIOD = tonumber(ARG[3])
local BURST = tonumber(ARG[4])
local CAL = tonumber(ARG[5])

-- Rule.Capacity
local CAP = LIMIT
if (ALG == 3 or ALG == 4) and BURST > 0 then
  CAP = BURST
end
-- Rule.Windowed
local WINDOWED = ALG == 1 or ALG == 2 or ALG == 5

local NOW = tonumber(ARG[6])
if NOW == nil then
  local t = call('TIME')
  NOW = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local US_PER_DAY = 86400000000
local MAX_PERIOD_US = 316224000000000 -- maxPeriodUS: gale.MaxPeriod in µs
local RETRY_PROBES = 8 -- retryProbes
local MIN_HEADROOM = -4503599627370496 -- minHeadroom: -2^52
local MAX_COUNT = 1125899906842624 -- maxCount: 2^50
local MAX_DEBT_US = 632448000000000 -- maxDebtUS: 2 · MAX_PERIOD_US

-- floorDiv: exact for integers below 2^53 (fmod is exact, and so is the
-- division of a multiple of b by b).
local function floordiv(a, b)
  local r = fmod(a, b)
  local q = (a - r) / b
  if r < 0 then
    q = q - 1
  end
  return q
end

-- The stored state; fields missing from the hash are 0. A state at or after
-- its ExpireAt is the zero State (as in memstore).
local function field(v, name)
  if not v then
    return 0
  end
  local n = tonumber(v)
  if n == nil then
    error('redisstore: field ' .. name .. ' of ' .. KEY .. ' is not a number')
  end
  return n
end

local function load_state()
  local h = call('HMGET', KEY, 'w', 'c', 'p', 't', 'r', 'k', 'u', 'x')
  local s = {
    w = field(h[1], 'w'), c = field(h[2], 'c'), p = field(h[3], 'p'),
    t = field(h[4], 't'), r = field(h[5], 'r'), k = field(h[6], 'k'),
    u = field(h[7], 'u'), x = field(h[8], 'x'),
  }
  if s.x <= NOW then
    return { w = 0, c = 0, p = 0, t = 0, r = 0, k = 0, u = 0, x = 0 }
  end
  return s
end

-- Numbers are written so that tonumber reads back the same double: the
-- integer fields (every one but k, all below 2^53) with %d, which is exact
-- and much cheaper than %.17g; k, the token count, with %.17g.
local function int(x)
  if x == 0 then
    return '0'
  end
  return format('%d', x)
end

local function float(x)
  if x == 0 then
    return '0'
  end
  return format('%.17g', x)
end

-- save writes state s; with expire_at (a Take) also the new ExpireAt and the
-- key's expiry, in whole milliseconds rounded up. A Give passes no
-- expire_at: its ExpireAt never grows, so x and the expiry stay.
local function save(s, expire_at)
  if expire_at == nil then
    call('HSET', KEY, 'w', int(s.w), 'c', int(s.c), 'p', int(s.p),
      't', int(s.t), 'r', int(s.r), 'k', float(s.k), 'u', int(s.u))
    return
  end
  call('HSET', KEY, 'w', int(s.w), 'c', int(s.c), 'p', int(s.p),
    't', int(s.t), 'r', int(s.r), 'k', float(s.k), 'u', int(s.u), 'x', int(expire_at))
  call('PEXPIREAT', KEY, int(-floordiv(-expire_at, 1000)))
end
