local st, q = KEYS[1], KEYS[2]
local inc, replica, prefix, lease, tid, wake, key = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]
redis.call('SET', prefix .. inc, '1', 'PX', lease, 'NX')
local out = {}
for i = 1, tonumber(ARGV[8]) do
  local seq = s(counter(st, 'n'))
  redis.call('ZADD', q, seq, seq .. '|' .. inc .. '|' .. tid .. '|' .. replica)
  out[i] = seq
end
redis.call('PERSIST', st)
local g = hand_over(st, q, prefix, wake, key, inc)
if g then
  table.insert(out, g[1]); table.insert(out, g[3]); table.insert(out, g[4]); table.insert(out, g[5])
else
  table.insert(out, ''); table.insert(out, ''); table.insert(out, ''); table.insert(out, '')
end
return out
