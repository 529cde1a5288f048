local function s(n) return string.format('%.0f', n) end
-- Runs `cmd key values…`, in chunks: Redis's Lua takes at most 8,000 values from `unpack`.
-- A chunk's 4,000 is even: it never parts a score from its member.
local function chunked(cmd, key, values)
  for i = 1, #values, 4000 do
    redis.call(cmd, key, unpack(values, i, math.min(i + 3999, #values)))
  end
end
-- The server's clock in microseconds, read once per script call: the counters a call starts
-- (see `counter`) are each a different field, so one reading serves them all.
local now_us
local function clock_us()
  if not now_us then
    local t = redis.call('TIME')
    now_us = t[1] .. string.format('%06d', tonumber(t[2]))
  end
  return now_us
end
-- The server's clock in milliseconds (exact in a double).
local function clock_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- Grows by one; a new field starts from the clock instead of 1.
local function counter(key, field)
  local v = redis.call('HINCRBY', key, field, 1)
  if v == 1 then
    v = clock_us()
    redis.call('HSET', key, field, v)
  end
  return v
end
-- Whether incarnation `inc`'s liveness key (under `prefix`) exists. Read once per script call
-- and key: a script sees the clock of its start, so no key expires while it runs, and the one
-- liveness key a script writes, its caller's own, goes through `register`.
local lives = {}
local function alive(prefix, inc)
  local key = prefix .. inc
  local live = lives[key]
  if live == nil then
    live = redis.call('EXISTS', key) == 1
    lives[key] = live
  end
  return live
end
-- Creates the caller's liveness key (under `prefix`, kept `lease` ms) when it has none: its
-- tickets would otherwise be skipped as a dead incarnation's.
local function register(prefix, inc, lease)
  local key = prefix .. inc
  if not lives[key] then
    redis.call('SET', key, '1', 'PX', lease, 'NX')
    lives[key] = true
  end
end
-- Queue members are "seq|incarnation|tid|replica" (tid: the taker's id for the call, so a
-- ticket whose reply was lost can be found again); the holder field is
-- "incarnation|seq|fence|tid".
local function owner(m) return string.match(m, '^[^|]*|([^|]*)|') end
local function fields(m) return string.match(m, '^([^|]*)|([^|]*)|([^|]*)|(.*)$') end
local function member_of(q, seq, inc)
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', q, seq, seq)) do
    if owner(m) == inc then return m end
  end
  return nil
end
-- Notes in 'd' (comma-separated) an incarnation passed over: the next grant names it.
local function passed(st, inc)
  local d = redis.call('HGET', st, 'd')
  if not d or d == '' then
    redis.call('HSET', st, 'd', inc)
  elseif not string.find(',' .. d .. ',', ',' .. inc .. ',', 1, true) then
    redis.call('HSET', st, 'd', d .. ',' .. inc)
  end
end
-- Clears the holder when its incarnation is dead.
local function live_holder(st, prefix)
  local h = redis.call('HGET', st, 'h')
  if not h then return nil end
  local inc = string.match(h, '^([^|]*)|')
  if alive(prefix, inc) then return h end
  redis.call('HDEL', st, 'h')
  passed(st, inc)
  return nil
end
-- Pops the first ticket of a live incarnation; tickets of dead ones are dropped on the way.
-- The caller's own incarnation `inc` is running this script, so its tickets are not checked.
-- Also returns whether it dropped any (the passed-over list changed).
local function pop_head(q, prefix, st, inc)
  local dropped = false
  while true do
    local m = redis.call('ZPOPMIN', q)[1]
    if not m then return nil, dropped end
    local owner_inc = owner(m)
    if owner_inc == inc or alive(prefix, owner_inc) then return m, dropped end
    passed(st, owner_inc)
    dropped = true
  end
end
-- Gives the free turn to ticket `seq` of incarnation `inc`, taken in call `tid` on replica
-- `replica`; returns {seq, fence, previous, passed over}. A turn's fence is its ticket's
-- number: tickets are granted in order, so fences grow. The previous holder is kept in 'p'
-- ('' for none) to be restored if the turn goes unused; the incarnations passed over move
-- from 'd' to 'hd', where the holder can read them again. `l` and `d`, when the caller read
-- them already, spare a read.
local function grant(st, seq, inc, tid, replica, l, d, n)
  if l == nil then
    local cur = redis.call('HMGET', st, 'l', 'd')
    l, d = cur[1], cur[2]
  end
  local prev, over = l or '', d or ''
  if over ~= '' then redis.call('HDEL', st, 'd') end
  local holder = inc .. '|' .. seq .. '|' .. seq .. '|' .. tid
  if n then
    -- The ticket counter, written with the grant (see `take`).
    redis.call('HSET', st, 'h', holder, 'l', replica, 'p', prev, 'hd', over, 'n', n)
  else
    redis.call('HSET', st, 'h', holder, 'l', replica, 'p', prev, 'hd', over)
  end
  return {seq, seq, prev, over}
end
-- Gives the free turn to queue member `m` (see `grant`); returns the grant and the
-- incarnation it went to.
local function grant_member(st, m, l, d)
  local seq, inc, tid, replica = fields(m)
  return grant(st, seq, inc, tid, replica, l, d), inc
end
-- Puts the previous holder back after an unused turn.
local function restore_previous(st)
  local p = redis.call('HGET', st, 'p')
  if p and p ~= '' then redis.call('HSET', st, 'l', p) else redis.call('HDEL', st, 'l') end
end
-- Drops a holder under whose turn nothing ran (its ticket withdrawn, or its reply lost): the
-- previous holder comes back, and what its grant passed over, which nobody took over, is
-- named again in the next grant.
local function unhold(st)
  local hd = redis.call('HGET', st, 'hd')
  for other in string.gmatch(hd or '', '[^,]+') do passed(st, other) end
  redis.call('HDEL', st, 'h', 'hd')
  restore_previous(st)
end
-- Tells incarnation `to` of grant `g`, on its own channel, grant included, so its waiter
-- needs no round trip; a grant to the caller's incarnation `inc` is answered in the reply
-- instead, and returned.
local function announce(g, to, wake, key, inc)
  if to ~= inc then
    redis.call('PUBLISH', wake .. to, key .. '\n' .. g[1] .. '\n' .. g[2] .. '\n' .. g[3] .. '\n' .. g[4])
    return nil
  end
  return g
end
-- With the turn free, hands it to the first live ticket (see `announce`). `free`: the caller
-- cleared the holder itself, so there is none to check. Returns the caller's grant, if any,
-- and whether the chat is idle (no holder, nothing queued).
local function hand_over(st, q, prefix, wake, key, inc, free)
  if not free and live_holder(st, prefix) then return nil, false end
  local m = pop_head(q, prefix, st, inc)
  if not m then return nil, true end
  local g, to = grant_member(st, m)
  return announce(g, to, wake, key, inc), false
end
-- After a turn was freed: hand it over, or let idle state expire. Returns a grant made to the
-- caller's own incarnation as `{seq, fence, prev, passed over}`, else `{}`.
local function freed(st, q, prefix, wake, key, keep, inc, free)
  local g, idle = hand_over(st, q, prefix, wake, key, inc, free)
  if g then return g end
  if idle then redis.call('PEXPIRE', st, keep) end
  return {}
end
-- Takes `count` tickets of chat `key` in order (state `st`, queue `q`) for the call `tid`.
-- A free turn has nothing queued (it is always handed to the first live ticket), so the first
-- new ticket takes it at once. Returns the tickets' numbers, the grant made to this
-- incarnation (`seq, fence, prev, passed over`, or four ''), and the incarnation holding the
-- turn ('' when unknown).
local function take(st, q, inc, replica, prefix, wake, key, count, tid)
  local cur = redis.call('HMGET', st, 'h', 'l', 'd', 'n')
  local h, n = cur[1], cur[4]
  -- The ticket counter. A new one starts from the clock (see `counter`). Held, the turn's
  -- counter grows here; free, the first ticket below takes the turn, and its grant writes the
  -- counter with the holder, one write for both.
  -- `start` is the last ticket's number as a string, when it is known without formatting
  -- `last` (a double) again: formatting costs more than the rest of a ticket's work.
  local last, start
  if not n then
    if count == 1 then
      start = clock_us()
    else
      last = tonumber(clock_us()) + count - 1
      start = s(last)
    end
    if h then redis.call('HSET', st, 'n', start) end
  elseif h then
    last = redis.call('HINCRBY', st, 'n', count)
  else
    last = tonumber(n) + count
    start = s(last)
  end
  local out, members, g = {}, {}, nil
  for i = 1, count do
    local seq = (i == count and start) or s(last - count + i)
    out[i] = seq
    if i == 1 and not h then
      -- Granted to this incarnation: answered in the reply.
      redis.call('PERSIST', st)
      g = grant(st, seq, inc, tid, replica, cur[2], cur[3], start)
    else
      members[#members + 1] = seq
      members[#members + 1] = seq .. '|' .. inc .. '|' .. tid .. '|' .. replica
    end
  end
  if #members > 0 then chunked('ZADD', q, members) end
  local holder = ''
  if h then
    holder = string.match(h, '^([^|]*)|')
    if holder ~= inc and not alive(prefix, holder) then
      -- Held by an incarnation that died: the turn goes to the first live ticket.
      g = hand_over(st, q, prefix, wake, key, inc, false)
      holder = string.match(redis.call('HGET', st, 'h') or '', '^([^|]*)|') or ''
    end
  end
  if g then
    -- The other tickets of this call wait behind the one granted.
    out[count + 1], out[count + 2], out[count + 3], out[count + 4] = g[1], g[2], g[3], g[4]
    holder = inc
  else
    out[count + 1], out[count + 2], out[count + 3], out[count + 4] = '', '', '', ''
  end
  out[count + 5] = holder
  return out
end
-- Whether holder field `h` is this incarnation's turn of ticket `seq`, or, for a run through
-- `through` (which otherwise is `seq`), of any ticket of the run: a release whose reply was
-- lost may have handed the turn on to the run's next ticket, which then went on in the
-- holder.
local function holds(h, inc, seq, through)
  local hinc, hseq = string.match(h, '^([^|]*)|([^|]*)|')
  if hinc ~= inc then return false end
  if through == seq then return hseq == seq end
  local n = tonumber(hseq)
  return n ~= nil and n >= tonumber(seq) and n <= tonumber(through)
end
-- Gives back the turn of ticket `seq` of this incarnation, used or not (`used` '1'/'0'),
-- handing back (`back` '1': whoever the turn was told about is passed on to the next grant),
-- then hands it to the first live ticket or lets the state expire after `keep` ms. When the
-- turn went on, in the holder, through a run of its next tickets up to `through` (which
-- otherwise is `seq`), those leave the queue, and what the grant of `seq` passed over was
-- taken over by the run already. Returns `{0}` when the turn was not ours, else `{1}`
-- followed by a grant the turn went on to for another ticket of this incarnation (`seq,
-- fence, prev, passed over`), if any.
local function release(st, q, inc, seq, through, used, keep, wake, key, prefix, back)
  local cur = redis.call('HMGET', st, 'h', 'p', 'hd', 'l', 'd')
  if not cur[1] or not holds(cur[1], inc, seq, through) then return {0} end
  local l, d = cur[4], cur[5]
  if through ~= seq then
    redis.call('ZREMRANGEBYSCORE', q, '-inf', through)
    cur[3] = nil
  end
  if back == '1' then
    passed(st, inc)
    for other in string.gmatch(cur[3] or '', '[^,]+') do passed(st, other) end
    l = nil
  end
  if used == '0' then
    -- Put the previous holder back: this turn did nothing.
    if cur[2] and cur[2] ~= '' then redis.call('HSET', st, 'l', cur[2]) else redis.call('HDEL', st, 'l') end
    l = nil
  end
  local m, dropped = pop_head(q, prefix, st, inc)
  if dropped then l = nil end
  if not m then
    redis.call('HDEL', st, 'h', 'hd')
    redis.call('PEXPIRE', st, keep)
    return {1}
  end
  local g, to = grant_member(st, m, l, d)
  g = announce(g, to, wake, key, inc)
  if g then return {1, g[1], g[2], g[3], g[4]} end
  return {1}
end
-- The inbox journal: a record is a hash (`k` chat key, `p` payload, `o` owner, `s` state, `n`
-- how long it is kept once acknowledged, ms), indexed while pending in a sorted set scored by
-- its place in the journal. A script call reserves the places of its appends in one step, when
-- the first one is written (`reserve`: how many it may write); a duplicate leaves its place
-- unused.
local jseq, jleft = 0, 0
-- The index's changes a script call makes, written together by `index_flush` before it
-- returns (see `indexing`): one ZADD and one ZREM for all its records, where each record cost
-- one of each.
-- Nothing in a call reads the index, and additions go first, so a record journaled and
-- acknowledged in one call leaves the index as it found it.
local index_key, index_adds, index_rems = nil, {}, {}
local function index_flush()
  if #index_adds > 0 then chunked('ZADD', index_key, index_adds); index_adds = {} end
  if #index_rems > 0 then chunked('ZREM', index_key, index_rems); index_rems = {} end
end
-- Runs `body`, then writes the index changes it gathered, even when it failed part way (a
-- record written is indexed, as when each record's change went with it), then fails as it did.
local function indexing(body)
  local ok, err = pcall(body)
  index_flush()
  if not ok then error(err, 0) end
end
-- Notes that this call changes index `pending` (a call's records share one; another one
-- flushes the first's changes).
local function index_of(pending)
  if index_key ~= pending then
    if index_key then index_flush() end
    index_key = pending
  end
end
-- Journals record `rec` (id `id`) unless it exists, indexed at `index_flush`. Returns 'new', or
-- the existing state.
local function journal_append(rec, pending, seqkey, reserve, id, key, payload, owner, state, retain)
  local existing = redis.call('HGET', rec, 's')
  if existing then return existing end
  if jleft == 0 then
    jseq = redis.call('INCRBY', seqkey, reserve) - reserve + 1
    jleft = reserve
  else
    jseq = jseq + 1
  end
  jleft = jleft - 1
  redis.call('HSET', rec, 'k', key, 'p', payload, 'o', owner, 's', state, 'n', retain)
  if state == 'pending' then
    index_of(pending)
    table.insert(index_adds, jseq)
    table.insert(index_adds, id)
  else
    redis.call('PEXPIRE', rec, retain)
  end
  return 'new'
end
-- Acknowledges record `rec` (id `id`): out of the index (at `index_flush`), kept for dedupe as
-- long as it says.
-- Returns 1, or 0 when it is gone.
local function journal_ack(rec, pending, id)
  local retain = redis.call('HGET', rec, 'n')
  if not retain then return 0 end
  redis.call('HSET', rec, 's', 'acked')
  index_of(pending)
  table.insert(index_rems, id)
  redis.call('PEXPIRE', rec, retain)
  return 1
end
