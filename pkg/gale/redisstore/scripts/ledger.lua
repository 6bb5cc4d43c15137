-- ledger: gale.DemandLedger's Announce. KEYS[1] is the counter's ledger, a
-- hash in the counter's Redis Cluster slot: field "." holds the window it
-- records (Unix µs / period), "c:NAME" each member's demand in it, and
-- "p:NAME" each member's demand in the window before, when the hash
-- recorded that one. ARGV: member, demand, period (µs), now (Unix µs; ''
-- reads TIME), early (µs). Replies name, demand, past, name, demand, past,
-- ...: every demand recorded in the window (past 0), the member's
-- included, and, while the window is under early old, the window before's
-- of members not heard in this one yet (past 1). A caller whose window is
-- older than the one recorded gets its own demand alone and changes
-- nothing. The hash lapses two periods
-- after its latest update (on Redis's clock, whatever the caller's).
local member, demand, period = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local now = ARGV[4]
if now == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(now)
end
local early = tonumber(ARGV[5])
local w = math.floor(now / period)
local cur = tonumber(redis.call('HGET', KEYS[1], '.'))
if cur and cur > w then
  return {member, demand, 0}
end
if cur ~= w then
  local all = redis.call('HGETALL', KEYS[1])
  redis.call('DEL', KEYS[1])
  if cur == w - 1 then
    for i = 1, #all, 2 do
      if string.sub(all[i], 1, 2) == 'c:' then
        redis.call('HSET', KEYS[1], 'p:' .. string.sub(all[i], 3), all[i + 1])
      end
    end
  end
  redis.call('HSET', KEYS[1], '.', w)
end
redis.call('HSET', KEYS[1], 'c:' .. member, demand)
redis.call('PEXPIRE', KEYS[1], math.ceil(2 * period / 1000))
local all = redis.call('HGETALL', KEYS[1])
local heard, out = {}, {}
for i = 1, #all, 2 do
  if string.sub(all[i], 1, 2) == 'c:' then
    local name = string.sub(all[i], 3)
    heard[name] = true
    out[#out + 1] = name
    out[#out + 1] = tonumber(all[i + 1])
    out[#out + 1] = 0
  end
end
if now - w * period < early then
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, 2) == 'p:' then
      local name = string.sub(all[i], 3)
      if not heard[name] then
        out[#out + 1] = name
        out[#out + 1] = tonumber(all[i + 1])
        out[#out + 1] = 1
      end
    end
  end
end
return out
