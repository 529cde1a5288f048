local st, q = KEYS[1], KEYS[2]
local inc, seq, used, keep, wake, key, prefix = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]
local mine = inc .. '|' .. seq .. '|'
local h = redis.call('HMGET', st, 'h', 'p')
if not h[1] or string.sub(h[1], 1, #mine) ~= mine then return {0} end
if ARGV[8] == '1' then
  -- Handing back: whoever this turn was told about is passed on to the next grant too.
  passed(st, inc)
  for other in string.gmatch(redis.call('HGET', st, 'hd') or '', '[^,]+') do passed(st, other) end
end
if used == '0' then
  -- Put the previous holder back: this turn did nothing.
  if h[2] and h[2] ~= '' then redis.call('HSET', st, 'l', h[2]) else redis.call('HDEL', st, 'l') end
end
redis.call('HDEL', st, 'h', 'hd')
local g = freed(st, q, prefix, wake, key, keep, inc, true)
return {1, g[1], g[2], g[3], g[4]}
