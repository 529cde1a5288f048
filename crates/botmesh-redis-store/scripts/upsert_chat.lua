local k = KEYS[1]
redis.call('HSETNX', k, 'first', ARGV[2])
local last = tonumber(redis.call('HGET', k, 'last') or '0')
if tonumber(ARGV[2]) > last then redis.call('HSET', k, 'last', ARGV[2]) end
redis.call('HSET', k, 'provider', ARGV[1])
if ARGV[3] ~= '' then redis.call('HSET', k, 'lang', ARGV[3]) end
return 1
