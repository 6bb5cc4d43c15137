-- leave: distributed.Leave on one gate's hash (see heartbeat.lua for the
-- record's encoding). Removes the node's field if the record is the
-- instance's, and replies 1; else changes nothing and replies 0.
--
-- KEYS[1]  the gate's hash
-- ARGV[1]  the node    ARGV[2] its instance

local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v then
  return 0
end
local _, e = string.find(v, '^%d+ %d+ %d+ %d+ %d+ %d+ %d+ %d+ %d+ ')
if e == nil or string.sub(v, e + 1) ~= ARGV[2] then
  return 0
end
redis.call('HDEL', KEYS[1], ARGV[1])
return 1
