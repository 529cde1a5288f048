if redis.call('HGET', KEYS[1], 's') ~= 'pending' or redis.call('HGET', KEYS[1], 'o') ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'o', ARGV[2])
return 1
