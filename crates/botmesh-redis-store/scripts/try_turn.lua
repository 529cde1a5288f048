local st, q = KEYS[1], KEYS[2]
local inc, prefix, seq, wake, key = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local mine = inc .. '|' .. seq .. '|'
local h = redis.call('HGET', st, 'h')
if h and string.sub(h, 1, #mine) == mine then
  local more = redis.call('HMGET', st, 'p', 'hd')
  return {'granted', string.match(h, '^[^|]*|[^|]*|([^|]*)'), more[1] or '', more[2] or ''}
end
if not member_of(q, seq, inc) then return {'gone'} end
local g = hand_over(st, q, prefix, wake, key, inc, false)
if g and g[1] == seq then return {'granted', g[2], g[3], g[4]} end
local holder = string.match(redis.call('HGET', st, 'h') or '', '^([^|]*)|') or ''
if g then return {'wait', g[1], g[2], g[3], g[4], holder} end
return {'wait', '', '', '', '', holder}
