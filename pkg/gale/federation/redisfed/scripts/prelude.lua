-- The prelude of every escrow script (then the operation's own file).
--
-- KEYS[1]  the balance hash: we the window's end (Unix µs, its name),
--          dl the deadline (Unix µs; dead from dl on), n the units
-- ARGV[1]  now, Unix µs; empty: read the server's clock (TIME)
-- ARGV[2…] the operation's own arguments
--
-- Every number is an integer below 2^53, exact in a double.

local format, tonumber, call = string.format, tonumber, redis.call
local KEY, ARG = KEYS[1], ARGV

local NOW = tonumber(ARG[1])
if NOW == nil then
  local t = call('TIME')
  NOW = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- The balance, or nil when there is none.
local function load()
  local h = call('HMGET', KEY, 'we', 'dl', 'n')
  if not h[1] then
    return nil
  end
  local b = { we = tonumber(h[1]), dl = tonumber(h[2]), n = tonumber(h[3]) }
  if b.we == nil or b.dl == nil or b.n == nil then
    error('redisfed: escrow balance ' .. KEY .. ' is malformed')
  end
  return b
end

local function int(x)
  return format('%d', x)
end
