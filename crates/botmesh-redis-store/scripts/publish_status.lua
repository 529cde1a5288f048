-- Replaces an incarnation's status document and keeps it `keep` ms, by the server's clock.
-- The index scores each incarnation by the end of its document's keep, so the entries whose
-- keep ended are one range to trim, and the index itself expires with its longest keep.
local index, doc = KEYS[1], KEYS[2]
local inc, replica, status, keep = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local now = clock_ms()
redis.call('HSET', doc, 'r', replica, 's', status, 't', s(now))
redis.call('PEXPIRE', doc, keep)
redis.call('ZADD', index, s(now + keep), inc)
redis.call('ZREMRANGEBYSCORE', index, '-inf', s(now))
local last = redis.call('ZRANGE', index, -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', index, s(tonumber(last[2])))
