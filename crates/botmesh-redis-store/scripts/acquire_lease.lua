local k = KEYS[1]
local holder = redis.call('HGET', k, 'h')
if holder and holder ~= ARGV[1] then return false end
if holder == ARGV[1] then
  redis.call('PEXPIRE', k, ARGV[2])
  return redis.call('HGET', k, 'g')
end
local fence = s(counter(k, 'f'))
redis.call('HSET', k, 'h', ARGV[1], 'g', fence)
redis.call('PEXPIRE', k, ARGV[2])
return fence
