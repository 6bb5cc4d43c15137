-- check: Rule.Take with min = max = ARGV[7] (the cost).
local cost = tonumber(ARG[7])
return take(cost, cost)
