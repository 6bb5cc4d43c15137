-- release: capture and zero the balance of the window ending at ARGV[2]
-- (Unix µs), dead or alive. Replies the units captured; the first release
-- captures them, later ones find no balance and capture 0.
local we = tonumber(ARG[2])
local b = load()
if b == nil or b.we ~= we then
  return 0
end
call('DEL', KEY)
return b.n
