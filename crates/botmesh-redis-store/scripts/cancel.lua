-- Withdraws ticket `seq`, queued or holding the turn. With `through` (else ''), `seq` held the
-- turn for a run of this incarnation's tickets that went on, in the replica, up to `through`,
-- whose ticket is the one withdrawn: the run's tickets leave the queue, and the run's turns
-- were used, so the previous holder stays this incarnation.
local st, q = KEYS[1], KEYS[2]
local inc, seq, keep, wake, key, prefix, through = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]
if through ~= '' then redis.call('ZREMRANGEBYSCORE', q, '-inf', through) end
local member = member_of(q, seq, inc)
if member then redis.call('ZREM', q, member) end
local h = redis.call('HGET', st, 'h')
local held = h and holds(h, inc, seq, through ~= '' and through or seq)
if held then
  if through == '' then unhold(st) else redis.call('HDEL', st, 'h') end
end
-- A withdrawn ticket's message did not get its turn: the next holder takes it over, if it
-- was journaled.
if member or held then passed(st, inc) end
local g = freed(st, q, prefix, wake, key, keep, inc, false)
return {1, g[1], g[2], g[3], g[4]}
