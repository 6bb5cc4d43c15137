-- The arithmetic of gale.Rule.Take and gale.Rule.Give (pkg/gale/strategy.go),
-- operation for operation and in the same order, so that every double
-- rounds as the Go float64 does (Go fuses no multiply-add here: each
-- product is divided before it is added). The Go code's integer arithmetic
-- is exact here too: every value is an integer below 2^53.

-- The token bucket's functions, made only for a token bucket, and
-- Rule.minTokens.
local fill_time, refill, refilled, refill_to, min_tokens
if ALG == 4 then
  min_tokens = CAP - LIMIT * MAX_DEBT_US / PERIOD

  -- Rule.fillTime
  fill_time = function(tokens)
    return ceil((CAP - tokens) * PERIOD / LIMIT)
  end

  -- Rule.refill: the tokens a bucket holding tokens at last holds at t.
  refill = function(tokens, last, t)
    if t <= last then
      return tokens
    end
    if t >= last + fill_time(tokens) then
      return CAP
    end
    tokens = tokens + (t - last) * LIMIT / PERIOD
    if tokens > CAP then
      return CAP
    end
    return tokens
  end

  -- The tokens and instant of a token bucket view brought up to its instant,
  -- leaving v as it is (the copy `at := v; at.refillTo(r)` of the Go code).
  refilled = function(v)
    if v.at > v.last then
      return refill(v.tokens, v.last, v.at), v.at
    end
    return v.tokens, v.last
  end

  -- view.refillTo
  refill_to = function(v)
    v.tokens, v.last = refilled(v)
  end
end

-- Rule.clock: a stale stamp is read in the newest window the state counts.
-- The reply's now stays NOW, the caller's instant.
local function clock(s)
  if WINDOWED and NOW < s.w then
    return s.w
  end
  return NOW
end

-- Rule.convertTAT: a TAT written at another rate (s.r) at s.u keeps the
-- level it held then, drained at LIMIT since, within MAX_PERIOD_US of s.u.
local function convert_tat(s)
  if s.r == 0 or s.r == LIMIT or s.u == 0 or s.t <= s.u then
    return s.t
  end
  local d = ceil((s.t - s.u) * s.r / LIMIT)
  if d > MAX_PERIOD_US then
    d = MAX_PERIOD_US
  end
  return s.u + d
end

-- Rule.view
local function view(s, now)
  local v = { ws = 0, we = 0, cur = 0, prev = 0, tat = 0, tokens = 0, last = 0, at = now }
  if ALG == 1 or ALG == 5 then
    v.ws, v.we = window_bounds(now)
    if s.w == v.ws then
      v.cur = s.c
    end
  elseif ALG == 2 then
    v.ws, v.we = window_bounds(now)
    if s.w == v.ws then
      v.cur, v.prev = s.c, s.p
    elseif s.w == v.ws - PERIOD then
      v.prev = s.c
    end
  elseif ALG == 3 then
    v.tat = convert_tat(s)
    if v.tat < now then
      v.tat = now
    end
  elseif ALG == 4 then
    -- Kept as stored: every instant refills from the stored state in one step.
    v.tokens, v.last = s.k, s.u
    if s.u == 0 then
      v.tokens, v.last = CAP, now
    end
    -- Tokens stored under a larger burst: at most the capacity; a debt
    -- stored under a faster rate: at most this rule's.
    if v.tokens > CAP then
      v.tokens = CAP
    end
    if v.tokens < min_tokens then
      v.tokens = min_tokens
    end
  end
  return v
end

-- view.headroom: available without its floor, below 0 when the state
-- stands past the limit (charges), down to MIN_HEADROOM; at most CAP.
local function headroom(v, t)
  local a = 0
  if ALG == 1 or ALG == 5 then
    if t >= v.we then
      return LIMIT
    end
    a = LIMIT - v.cur
  elseif ALG == 2 then
    local ws, cur, prev = v.ws, v.cur, v.prev
    if t >= v.we then
      ws, cur, prev = v.we, 0, v.cur
      if t >= v.we + PERIOD then
        return LIMIT
      end
    end
    local est = prev * (PERIOD - (t - ws)) / PERIOD + cur
    a = floor(LIMIT - est)
  elseif ALG == 3 then
    local u = (v.tat - t) * LIMIT / PERIOD
    if v.tat <= t then
      u = 0
    end
    a = floor(CAP - u)
  elseif ALG == 4 then
    a = floor(refill(v.tokens, v.last, t))
  end
  if a < MIN_HEADROOM then
    return MIN_HEADROOM
  end
  if a > CAP then
    return CAP
  end
  return a
end

-- view.available
local function available(v, t)
  local a = headroom(v, t)
  if a < 0 then
    return 0
  end
  return a
end

-- view.take
local function take_units(v, n)
  if WINDOWED then
    v.cur = v.cur + n
  elseif ALG == 3 then
    v.tat = v.tat + ceil(n * PERIOD / LIMIT)
  elseif ALG == 4 then
    refill_to(v)
    v.tokens = v.tokens - n
  end
end

-- view.give, reporting whether it changed the view (Go: v != before; give
-- changes cur, tat, or tokens and last, by strategy).
local function give_units(v, n)
  if WINDOWED then
    local before = v.cur
    v.cur = v.cur - n
    if v.cur < 0 then
      v.cur = 0
    end
    return v.cur ~= before
  elseif ALG == 3 then
    local before = v.tat
    v.tat = v.tat - floor(n * PERIOD / LIMIT)
    if v.tat < v.at then
      v.tat = v.at
    end
    return v.tat ~= before
  elseif ALG == 4 then
    local tokens, last = v.tokens, v.last
    refill_to(v)
    v.tokens = v.tokens + n
    if v.tokens > CAP then
      v.tokens = CAP
    end
    return v.tokens ~= tokens or v.last ~= last
  end
  return false
end

-- view.state
local function state_of(v)
  local s = { w = 0, c = 0, p = 0, t = 0, r = 0, k = 0, u = 0 }
  if ALG == 1 or ALG == 5 then
    s.w, s.c = v.ws, v.cur
  elseif ALG == 2 then
    s.w, s.c, s.p = v.ws, v.cur, v.prev
  elseif ALG == 3 then
    s.t, s.r, s.u = v.tat, LIMIT, v.at
  elseif ALG == 4 then
    s.k, s.u = v.tokens, v.last
  end
  return s
end

-- view.windowEnd
local function window_end(v)
  if WINDOWED then
    return v.we
  end
  return 0
end

-- view.expireAt
local function expire_at(v)
  if ALG == 2 then
    return v.we + PERIOD
  elseif ALG == 3 then
    return v.tat
  elseif ALG == 4 then
    local tokens, last = refilled(v)
    return last + fill_time(tokens)
  end
  return v.we
end

-- view.resetAt: the first instant at which the whole capacity is back.
local function reset_at(v, now)
  if ALG == 2 then
    if v.cur > 0 then
      return v.we + PERIOD
    end
    return v.we
  elseif ALG == 4 then
    -- Step forward while the bucket does not read full yet, then back while
    -- it already did a microsecond earlier.
    local t = expire_at(v)
    for _ = 1, RETRY_PROBES do
      if available(v, t) >= CAP then
        break
      end
      t = t + 1
    end
    for _ = 1, RETRY_PROBES do
      if not (t > now and available(v, t - 1) >= CAP) then
        break
      end
      t = t - 1
    end
    return t
  end
  return expire_at(v)
end

-- view.retryAt
local function retry_at(v, now, need)
  if need > CAP then
    local at = reset_at(v, now)
    if at > now then
      return at
    end
    return now + PERIOD
  end
  local t = 0
  if ALG == 1 or ALG == 5 then
    return v.we
  elseif ALG == 2 then
    if v.cur <= LIMIT - need and v.prev > 0 then
      t = v.ws + ceil(PERIOD - (LIMIT - need - v.cur) * PERIOD / v.prev)
    else
      t = v.we + ceil(PERIOD - (LIMIT - need) * PERIOD / v.cur)
    end
  elseif ALG == 3 then
    t = v.tat - floor((CAP - need) * PERIOD / LIMIT)
  elseif ALG == 4 then
    local tokens, last = refilled(v)
    t = last + ceil((need - tokens) * PERIOD / LIMIT)
  end
  if t <= now then
    t = now + 1
  end
  -- The estimate is floating point: step forward while the need does not
  -- fit yet, then back while it already fit a microsecond earlier.
  for _ = 1, RETRY_PROBES do
    if headroom(v, t) >= need then
      break
    end
    t = t + 1
  end
  for _ = 1, RETRY_PROBES do
    if not (t - 1 > now and headroom(v, t - 1) >= need) then
      break
    end
    t = t - 1
  end
  return t
end

-- Rule.Take against the stored state. Returns the reply
-- {granted, remaining, resetAt, retryAfter, windowEnd, now} (µs); a denial
-- writes nothing.
local function take(min, max)
  local s = load_state()
  local t = clock(s)
  local v = view(s, t)
  local avail = available(v, t)
  if avail < min then
    return { 0, avail, reset_at(v, t), retry_at(v, t, min) - t, window_end(v), NOW }
  end
  local g = max
  if avail < g then
    g = avail
  end
  take_units(v, g)
  save(state_of(v), expire_at(v))
  return { g, available(v, t), reset_at(v, t), 0, window_end(v), NOW }
end

-- Rule.Give against the stored state: 1 when it changed the state (and wrote
-- it), 0 when it changed nothing (and wrote nothing).
local function give(n, window_end_at)
  if n <= 0 then
    return 0
  end
  local s = load_state()
  if s.x == 0 then
    return 0 -- none, or expired: the memory store has no state to give to
  end
  local v = view(s, clock(s))
  if WINDOWED and (window_end_at ~= v.we or v.cur == 0) then
    return 0
  end
  if not give_units(v, n) then
    return 0
  end
  save(state_of(v), nil)
  return 1
end
