if redis.call('HGET', KEYS[1], 'i') == ARGV[1] and redis.call('HGET', KEYS[1], 'g') == ARGV[2] then
  redis.call('HDEL', KEYS[1], 'i', 'r', 'g')
  return 1
end
return 0
