local k = KEYS[1]
if redis.call('HEXISTS', k, 'd') == 0 then return 0 end
if ARGV[1] ~= '' and redis.call('HGET', k, 'r') ~= ARGV[1] then return 0 end
redis.call('HDEL', k, 'd')
redis.call('PEXPIRE', k, ARGV[2])
return 1
