-- Window bounds: Rule.WindowBounds and calendarBounds of
-- pkg/gale/strategy.go, the calendar by Howard Hinnant's civil-date
-- algorithms (exact in doubles: every value is a small integer).

-- The calendar functions are made only for a quota: every function a script
-- defines is a closure made anew on each call.
local days_from_civil, civil_from_days, calendar_bounds
if ALG == 5 then
  -- Howard Hinnant's days_from_civil: days since 1970-01-01 of y-m-d.
  days_from_civil = function(y, m, d)
    if m <= 2 then
      y = y - 1
    end
    local era = floordiv(y, 400)
    local yoe = y - era * 400
    local mp = m + 9
    if m > 2 then
      mp = m - 3
    end
    local doy = floor((153 * mp + 2) / 5) + d - 1
    local doe = yoe * 365 + floor(yoe / 4) - floor(yoe / 100) + doy
    return era * 146097 + doe - 719468
  end

  -- Howard Hinnant's civil_from_days: the year and month of day z.
  civil_from_days = function(z)
    z = z + 719468
    local era = floordiv(z, 146097)
    local doe = z - era * 146097
    local yoe = floor((doe - floor(doe / 1460) + floor(doe / 36524) - floor(doe / 146096)) / 365)
    local y = yoe + era * 400
    local doy = doe - (365 * yoe + floor(yoe / 4) - floor(yoe / 100))
    local mp = floor((5 * doy + 2) / 153)
    local m = mp - 9
    if mp < 10 then
      m = mp + 3
    end
    if m <= 2 then
      y = y + 1
    end
    return y, m
  end

  -- calendarBounds
  calendar_bounds = function(now)
    if CAL == 1 then
      local start = floordiv(now, US_PER_DAY) * US_PER_DAY
      return start, start + US_PER_DAY
    elseif CAL == 2 then
      local week = 7 * US_PER_DAY
      local start = floordiv(now + 3 * US_PER_DAY, week) * week - 3 * US_PER_DAY
      return start, start + week
    end
    local y, m = civil_from_days(floordiv(now, US_PER_DAY))
    local from, to
    if CAL == 3 then
      from = days_from_civil(y, m, 1)
      if m == 12 then
        to = days_from_civil(y + 1, 1, 1)
      else
        to = days_from_civil(y, m + 1, 1)
      end
    else
      from = days_from_civil(y, 1, 1)
      to = days_from_civil(y + 1, 1, 1)
    end
    return from * US_PER_DAY, to * US_PER_DAY
  end
end

-- Rule.WindowBounds
local function window_bounds(now)
  if ALG == 1 or ALG == 2 then
    local start = floordiv(now, PERIOD) * PERIOD
    return start, start + PERIOD
  elseif ALG == 5 then
    return calendar_bounds(now)
  end
  return 0, 0
end
