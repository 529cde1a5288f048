local k = KEYS[1]
local mode, expected, data, ttl, keep = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local current = ''
if redis.call('HEXISTS', k, 'd') == 1 then current = redis.call('HGET', k, 'r') end
if mode == 'absent' and current ~= '' then return {0, current} end
if mode == 'rev' and current ~= expected then return {0, current} end
local rev = s(counter(k, 'r'))
redis.call('HSET', k, 'd', data)
if ttl ~= '' then redis.call('PEXPIRE', k, ttl) else redis.call('PERSIST', k) end
return {1, rev}
