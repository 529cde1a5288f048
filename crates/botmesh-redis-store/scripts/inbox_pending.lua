local out = {}
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)) do
  local f = redis.call('HMGET', ARGV[2] .. id, 'k', 'p', 'o')
  if f[1] then
    table.insert(out, id); table.insert(out, f[1]); table.insert(out, f[2]); table.insert(out, f[3])
  else
    -- The record is gone (it expired): so is its place in the index.
    redis.call('ZREM', KEYS[1], id)
  end
end
return out
