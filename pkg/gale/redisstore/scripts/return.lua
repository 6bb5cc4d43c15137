-- return: Rule.Give of ARGV[7] units to the window ending at ARGV[8] (Unix
-- µs; 0 for the strategies without windows).
return give(tonumber(ARG[7]), tonumber(ARG[8]))
