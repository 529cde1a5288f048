local rec, pending, seqkey = KEYS[1], KEYS[2], KEYS[3]
local existing = redis.call('HGET', rec, 's')
if existing then return existing end
local seq = redis.call('INCR', seqkey)
redis.call('HSET', rec, 'k', ARGV[2], 'p', ARGV[3], 'o', ARGV[4], 's', ARGV[5], 'n', ARGV[6])
if ARGV[5] == 'pending' then
  redis.call('ZADD', pending, seq, ARGV[1])
else
  redis.call('PEXPIRE', rec, ARGV[6])
end
return 'new'
