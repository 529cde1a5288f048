local k = KEYS[1]
if redis.call('HEXISTS', k, 't') == 1 then return false end
local fence = s(counter(k, 'f'))
redis.call('HSET', k, 't', ARGV[1])
redis.call('PEXPIRE', k, ARGV[2])
return fence
