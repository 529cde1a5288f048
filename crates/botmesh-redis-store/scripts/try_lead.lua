local lk = KEYS[1]
local inc, replica, prefix, lease = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
register(prefix, inc, lease)
local cur = redis.call('HGET', lk, 'i')
if cur == inc then return redis.call('HGET', lk, 'g') end
if cur and alive(prefix, cur) then return false end
local fence = s(counter(lk, 'f'))
redis.call('HSET', lk, 'i', inc, 'r', replica, 'g', fence)
return fence
