-- charge: Rule.Charge of ARGV[7] units, counted in full even past the limit
-- (0 counts nothing: it asks whether the key stands at or below the limit).
-- Reply {counted, remaining, resetAt, retryAfter, windowEnd, now, over,
-- overrun}: over is 1 when the charge did not fit, overrun the units it
-- counted past the limit. view.charge is here, not in strategy.lua, so the
-- other scripts do not make its closure on every call.
local n = tonumber(ARG[7])
local s = load_state()
local t = clock(s)
local v = view(s, t)
local room = headroom(v, t)
if n > 0 then
  -- view.charge: take_units past the limit, within the bounds of a debt.
  if WINDOWED then
    v.cur = v.cur + n
    if v.cur > MAX_COUNT then
      v.cur = MAX_COUNT
    end
  elseif ALG == 3 then
    local d = ceil(n * PERIOD / LIMIT)
    if d > MAX_DEBT_US then
      d = MAX_DEBT_US
    end
    v.tat = v.tat + d
    if v.tat > v.at + MAX_DEBT_US then
      v.tat = v.at + MAX_DEBT_US
    end
  elseif ALG == 4 then
    refill_to(v)
    v.tokens = v.tokens - n
    if v.tokens < min_tokens then
      v.tokens = min_tokens
    end
  end
  save(state_of(v), expire_at(v))
end
local over, overrun, retry = 0, 0, 0
if room < n then
  over = 1
  overrun = n
  if room > 0 then
    overrun = n - room
  end
  retry = retry_at(v, t, 0) - t
end
return { n, available(v, t), reset_at(v, t), retry, window_end(v), NOW, over, overrun }
