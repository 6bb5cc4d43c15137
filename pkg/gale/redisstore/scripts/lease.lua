-- lease: Rule.Take with min = ARGV[7], max = ARGV[8].
return take(tonumber(ARG[7]), tonumber(ARG[8]))
