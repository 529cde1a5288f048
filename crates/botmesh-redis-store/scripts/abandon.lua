local st, q = KEYS[1], KEYS[2]
local inc, tid, keep, wake, key, prefix = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
for _, m in ipairs(redis.call('ZRANGE', q, 0, -1)) do
  local _, minc, mtid = fields(m)
  if minc == inc and mtid == tid then redis.call('ZREM', q, m) end
end
local h = redis.call('HGET', st, 'h')
if h and string.sub(h, 1, #inc + 1) == inc .. '|' and string.sub(h, -(#tid + 1)) == '|' .. tid then
  unhold(st)
end
local g = freed(st, q, prefix, wake, key, keep, inc, false)
return {1, g[1], g[2], g[3], g[4]}
