-- heartbeat: distributed.Beat on one gate's records, step for step (the
-- numbered steps are Beat's). The gate is one hash: field a nodeId, value
-- the node's record,
--
--   seq local inflight demand appliedGen expiresAt share gen high instance
--
-- nine decimal integers, each followed by a space, then the instance's
-- bytes to the end of the value (any bytes: nothing follows them).
--
-- KEYS[1]   the gate's hash
-- ARGV[1]   now, Unix µs; empty: read the server's clock (TIME)
-- ARGV[2]   the report's node        ARGV[3]  its instance
-- ARGV[4]   its seq, a canonical decimal below 2^64, compared digit by
--           digit: a double holds integers exactly only below 2^53
-- ARGV[5]   local    ARGV[6] inflight    ARGV[7] demand (each ≤ MaxCount)
-- ARGV[8]   the applied generation (≤ MaxGen, 2^52)
-- ARGV[9]   the lease TTL, µs
-- ARGV[10]  aggregate: 0 min, 1 lower median, 2 mean (rounded down)
-- ARGV[11]  split: 0 equal, 1 demand
-- ARGV[12]  handoff: 0 or 1
--
-- Replies {1, share, gen, global, live, expiresAt, now} for a grant;
-- {2, share, gen, 0, live, expiresAt, now} for a stale report, the
-- recorded share and no global (as Beat's stale); {3, instance} for a live
-- record of another instance (a duplicate nodeId); {4, node} for a record
-- that does not decode. Only a grant writes.
--
-- Every number but seq is an integer below 2^53, and so is every sum and
-- product below: counts are at most MaxCount (2^26 − 1), so the product of
-- two is below 2^52, and a sum of one per node below 2^53 for fewer than
-- 2^27 nodes. Doubles are exact there, and floor(x / y) is Go's x / y for
-- 0 ≤ x < 2^53, y ≥ 1: the quotient's rounding error, at most x·2^−53, is
-- less than 1/y, its least distance from an integer it is not.

local call, tonumber, find, sub, byte, format = redis.call, tonumber, string.find, string.sub, string.byte, string.format
local floor, fmod, min, max = math.floor, math.fmod, math.min, math.max
local KEY, ARG = KEYS[1], ARGV

local now = tonumber(ARG[1])
if now == nil then
  local t = call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local node, instance, seq = ARG[2], ARG[3], ARG[4]
local loc, inflight, demand, applied = tonumber(ARG[5]), tonumber(ARG[6]), tonumber(ARG[7]), tonumber(ARG[8])
local ttl, median, mean, bydemand, handoff = tonumber(ARG[9]), ARG[10] == '1', ARG[10] == '2', ARG[11] == '1', ARG[12] == '1'

-- less reports whether a sorts before b byte by byte, as Go orders strings.
-- Lua's < on strings is strcoll, which follows the server's locale.
local function less(a, b)
  for i = 1, min(#a, #b) do
    local x, y = byte(a, i), byte(b, i)
    if x ~= y then
      return x < y
    end
  end
  return #a < #b
end

-- above reports whether the canonical decimal a is greater than b.
local function above(a, b)
  if #a ~= #b then
    return #a > #b
  end
  return less(b, a)
end

local RECORD = '^(%d+) (%d+) (%d+) (%d+) (%d+) (%d+) (%d+) (%d+) (%d+) '

-- decode returns the record of node stored as value, or nil.
local function decode(field, value)
  local _, e, s, l, i, d, a, x, sh, g, h = find(value, RECORD)
  if e == nil then
    return nil
  end
  return {
    node = field, instance = sub(value, e + 1), seq = s,
    loc = tonumber(l), inflight = tonumber(i), demand = tonumber(d), applied = tonumber(a),
    expires = tonumber(x), share = tonumber(sh), gen = tonumber(g), high = tonumber(h),
  }
end

local function encode(r)
  -- The instance is appended, not formatted: %s stops at a zero byte.
  return format('%s %d %d %d %d %d %d %d %d ', r.seq, r.loc, r.inflight, r.demand, r.applied,
    r.expires, r.share, r.gen, r.high) .. r.instance
end

-- reserve is what r holds back from the other nodes' shares.
local function reserve(r)
  if handoff and r.applied < r.gen then
    return max(r.high, r.inflight)
  end
  return max(r.share, r.inflight)
end

local raw = call('HGETALL', KEY)
local recs, me = {}, nil
for k = 1, #raw, 2 do
  local r = decode(raw[k], raw[k + 1])
  if r == nil then
    return { 4, raw[k] }
  end
  recs[#recs + 1] = r
  if r.node == node then
    me = r
  end
end

-- 1. Upsert the reporter: a live record of another instance is a
-- duplicate, a seq not above the recorded one stale; neither writes.
if me ~= nil then
  if me.instance ~= instance and me.expires > now then
    return { 3, me.instance }
  end
  if me.instance == instance and not above(seq, me.seq) then
    local live = 0
    for _, r in ipairs(recs) do
      if r.expires > now or r.node == node then
        live = live + 1
      end
    end
    return { 2, me.share, me.gen, 0, live, me.expires, now }
  end
  if me.instance ~= instance then
    me = nil -- a new incarnation starts afresh
  end
end
if me == nil then
  me = { node = node, applied = 0, share = 0, gen = 0, high = 0 }
end
me.instance, me.seq, me.loc, me.inflight, me.demand = instance, seq, loc, inflight, demand
-- Every generation up to the echoed one is spent for the node: a record
-- that never issued it (recreated, or its state lost) numbers on above it.
me.gen = max(me.gen, applied)
me.applied = max(me.applied, applied)
if me.applied == me.gen then
  me.high = me.share -- acknowledged: it admits under its latest share
end
me.expires = now + ttl

-- 2. Evict the records whose lease has expired; the reporter survives.
local others, evicted = {}, {}
for _, r in ipairs(recs) do
  if r.node ~= node then
    if r.expires <= now then
      evicted[#evicted + 1] = r.node
    else
      others[#others + 1] = r
    end
  end
end
local n = #others + 1

-- 3. Aggregate the live local limits into L_global.
local global = loc
if median then
  local locals = { loc }
  for i, r in ipairs(others) do
    locals[i + 1] = r.loc
  end
  table.sort(locals)
  global = locals[floor((n - 1) / 2) + 1]
elseif mean then
  local sum = loc
  for _, r in ipairs(others) do
    sum = sum + r.loc
  end
  global = floor(sum / n)
else
  for _, r in ipairs(others) do
    global = min(global, r.loc)
  end
end

-- 4. Target: the reporter's part of L_global by the split.
local total = demand
for _, r in ipairs(others) do
  total = total + r.demand
end
local target
if bydemand and total > 0 and global >= n then
  target = 1 + floor((global - n) * demand / total)
else
  -- The remainder goes one slot each to global mod n nodes in nodeId
  -- order, starting from the one whose turn it is, turn = now / ttl
  -- truncated (Go's integer division): fmod is exact on doubles, so
  -- now − fmod(now, ttl) is a multiple of ttl and the quotient exact.
  local rank = 0
  for _, r in ipairs(others) do
    if less(r.node, node) then
      rank = rank + 1
    end
  end
  local turn = (now - fmod(now, ttl)) / ttl
  local first = fmod(fmod(turn, n) + n, n)
  target = floor(global / n)
  if fmod(rank - first + n, n) < global - floor(global / n) * n then
    target = target + 1
  end
end

-- 5. Cap: L_global less the others' reserves.
local free = global
for _, r in ipairs(others) do
  free = free - reserve(r)
end
local share = max(0, min(target, free))
me.gen = me.gen + 1
me.share = share
me.high = max(me.high, share)

-- Write back: the evicted out, the reporter in, and the hash to expire in
-- twice the longest lease left, as long again after its last record dies
-- (on Redis's clock).
for i = 1, #evicted, 1000 do
  call('HDEL', KEY, unpack(evicted, i, min(i + 999, #evicted)))
end
call('HSET', KEY, node, encode(me))
local last = me.expires
for _, r in ipairs(others) do
  last = max(last, r.expires)
end
call('PEXPIRE', KEY, format('%d', floor((2 * (last - now) + 999) / 1000)))
return { 1, share, me.gen, global, n, me.expires, now }
