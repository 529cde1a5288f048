local retain = redis.call('HGET', KEYS[1], 'n')
if not retain then return 0 end
redis.call('HSET', KEYS[1], 's', 'acked')
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('PEXPIRE', KEYS[1], retain)
return 1
