if redis.call('HGET', KEYS[1], 'h') ~= ARGV[1] then return 0 end
redis.call('HDEL', KEYS[1], 'h', 'g')
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
