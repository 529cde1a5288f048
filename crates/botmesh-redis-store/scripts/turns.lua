-- A batch of takes and releases, each on its own chat, run in order (see `take` and
-- `release` in the prelude). Where the journal shares the server, a take may journal its
-- messages first, and a release acknowledge one (see `journal_append` and `journal_ack`).
-- KEYS: per operation, the chat's state and queue; then, for a journaling take, the journal's
-- pending index, its sequence and each message's record; for an acknowledging release, the
-- pending index and the record.
-- ARGV: incarnation, replica, alive prefix, lease ms, wake prefix, how many records the
-- batch journals, then per operation one of:
-- 't', chat key, count, tid;
-- 'j', chat key, count, tid, owner, retain ms, then per message its id and payload (journal
--   the messages in order, stopping after the first one found pending already; take a ticket
--   for each one journaled now);
-- 'r', chat key, seq, through, used (1/0), keep ms, hand back (1/0), id to acknowledge or ''.
-- Returns, per operation, the length of its reply, then the reply. A journaling take's reply
-- is the number of messages looked at, their states ('new' or the record's), then the take's
-- reply when any was new.
local inc, replica, prefix, lease, wake = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local reserve = tonumber(ARGV[6])
local out, a, k = {}, 7, 1
local function emit(reply)
  local n, len = #out, #reply
  out[n + 1] = len
  for i = 1, len do out[n + 1 + i] = reply[i] end
end
indexing(function()
  while a <= #ARGV do
    local op, st, q, key = ARGV[a], KEYS[k], KEYS[k + 1], ARGV[a + 1]
    k = k + 2
    if op == 't' then
      register(prefix, inc, lease)
      emit(take(st, q, inc, replica, prefix, wake, key, tonumber(ARGV[a + 2]), ARGV[a + 3]))
      a = a + 4
    elseif op == 'j' then
      local n, tid, owner, retain = tonumber(ARGV[a + 2]), ARGV[a + 3], ARGV[a + 4], ARGV[a + 5]
      local pending, seqkey = KEYS[k], KEYS[k + 1]
      local reply, fresh = {0}, 0
      for i = 1, n do
        local m = a + 4 + 2 * i
        local s = journal_append(KEYS[k + 1 + i], pending, seqkey, reserve, ARGV[m], key, ARGV[m + 1], owner, 'pending', retain)
        table.insert(reply, s)
        reply[1] = i
        if s == 'new' then
          fresh = fresh + 1
        elseif s == 'pending' then
          break
        end
      end
      if fresh > 0 then
        register(prefix, inc, lease)
        for _, v in ipairs(take(st, q, inc, replica, prefix, wake, key, fresh, tid)) do
          table.insert(reply, v)
        end
      end
      emit(reply)
      k = k + 2 + n
      a = a + 6 + 2 * n
    else
      local id = ARGV[a + 7]
      if id ~= '' then
        journal_ack(KEYS[k + 1], KEYS[k], id)
        k = k + 2
      end
      emit(release(st, q, inc, ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 5], wake, key, prefix, ARGV[a + 6]))
      a = a + 8
    end
  end
end)
return out
