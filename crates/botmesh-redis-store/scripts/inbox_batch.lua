-- A batch of journal appends, acknowledgements and outbox marks, run in order (see
-- `journal_append` and `journal_ack` in the prelude).
-- KEYS: the pending index, the sequence, then the record (or outbox entry) of each call.
-- ARGV: the number of appends, then per call: 'a', id, chat key, payload, owner, state, retain
-- ms (append: 'new', or the existing record's state); 'k', id (acknowledge: 1, or 0 when the
-- record is gone); or 'o', ttl ms (mark a send made, kept ttl ms from now: 1).
-- Returns, per call, its reply's length (1), then the reply.
local pending, seqkey, reserve = KEYS[1], KEYS[2], tonumber(ARGV[1])
local out, a, k = {}, 2, 3
indexing(function()
  while a <= #ARGV do
    local rec, id = KEYS[k], ARGV[a + 1]
    k = k + 1
    table.insert(out, 1)
    if ARGV[a] == 'a' then
      table.insert(out, journal_append(rec, pending, seqkey, reserve, id, ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 5], ARGV[a + 6]))
      a = a + 7
    elseif ARGV[a] == 'o' then
      redis.call('SET', rec, '1', 'PX', ARGV[a + 1])
      table.insert(out, 1)
      a = a + 2
    else
      table.insert(out, journal_ack(rec, pending, id))
      a = a + 2
    end
  end
end)
return out
