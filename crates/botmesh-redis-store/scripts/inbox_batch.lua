-- A batch of journal appends, acknowledgements and outbox claims, run in order.
-- KEYS: the pending index, the sequence, then the record (or outbox entry) of each call.
-- ARGV: the number of appends, then per call: 'a', id, chat key, payload, owner, state, retain
-- ms (append: 'new', or the existing record's state); 'k', id (acknowledge: 1, or 0 when the
-- record is gone); or 'o', token, ttl ms (claim: 1 when the entry is this token's, set now or
-- by the same claim sent before; 0 when another claim holds it).
-- Returns, per call, its reply's length (1), then the reply.
local pending, seqkey = KEYS[1], KEYS[2]
local out, a, k = {}, 2, 3
-- The sequence numbers of the batch's new records, taken in one step when the first is
-- written: the next is `seq + 1`, and a duplicate leaves its number unused.
local seq = nil
while a <= #ARGV do
  local rec, id = KEYS[k], ARGV[a + 1]
  k = k + 1
  if ARGV[a] == 'a' then
    local state, retain = ARGV[a + 5], ARGV[a + 6]
    local existing = redis.call('HGET', rec, 's')
    if existing then
      table.insert(out, 1); table.insert(out, existing)
    else
      if seq then
        seq = seq + 1
      else
        seq = redis.call('INCRBY', seqkey, ARGV[1]) - tonumber(ARGV[1]) + 1
      end
      redis.call('HSET', rec, 'k', ARGV[a + 2], 'p', ARGV[a + 3], 'o', ARGV[a + 4], 's', state, 'n', retain)
      if state == 'pending' then
        redis.call('ZADD', pending, seq, id)
      else
        redis.call('PEXPIRE', rec, retain)
      end
      table.insert(out, 1); table.insert(out, 'new')
    end
    a = a + 7
  elseif ARGV[a] == 'o' then
    local tok = ARGV[a + 1]
    if redis.call('SET', rec, tok, 'NX', 'PX', ARGV[a + 2]) or redis.call('GET', rec) == tok then
      table.insert(out, 1); table.insert(out, 1)
    else
      table.insert(out, 1); table.insert(out, 0)
    end
    a = a + 3
  else
    local retain = redis.call('HGET', rec, 'n')
    if retain then
      redis.call('HSET', rec, 's', 'acked')
      redis.call('ZREM', pending, id)
      redis.call('PEXPIRE', rec, retain)
      table.insert(out, 1); table.insert(out, 1)
    else
      table.insert(out, 1); table.insert(out, 0)
    end
    a = a + 2
  end
end
return out
