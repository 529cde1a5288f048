//! The Lua scripts: every read-then-write on Redis is one of these, so it runs atomically on
//! the server.
//!
//! Numbers that must never repeat for a key (ticket numbers, fences, checkpoint revisions)
//! start from the server's clock in microseconds when the key is created, then grow by one.
//! A key that expired or was deleted therefore restarts above every value it ever handed out.
//! They travel as decimal strings: Lua numbers are doubles and print large integers in
//! exponent form.

/// Helpers shared by the scripts.
const PRELUDE: &str = r#"
local function s(n) return string.format('%.0f', n) end
local function clock_us()
  local t = redis.call('TIME')
  return t[1] .. string.format('%06d', tonumber(t[2]))
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
local function alive(prefix, inc) return redis.call('EXISTS', prefix .. inc) == 1 end
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
-- The first ticket of a live incarnation; tickets of dead ones are dropped on the way.
local function head(q, prefix, st)
  while true do
    local m = redis.call('ZRANGE', q, 0, 0)[1]
    if not m then return nil end
    local inc = owner(m)
    if alive(prefix, inc) then return m end
    redis.call('ZREM', q, m)
    passed(st, inc)
  end
end
-- Gives the free turn to queued ticket `m`; returns {seq, incarnation, fence, previous,
-- passed over}. The previous holder is kept in 'p' ('' for none) to be restored if the turn
-- goes unused; the incarnations passed over move from 'd' to 'hd', where the holder can read
-- them again.
local function grant(st, q, m)
  local seq, inc, tid, replica = fields(m)
  redis.call('ZREM', q, m)
  local fence = s(counter(st, 'f'))
  local prev = redis.call('HGET', st, 'l') or ''
  local over = redis.call('HGET', st, 'd') or ''
  redis.call('HDEL', st, 'd')
  redis.call('HSET', st, 'h', inc .. '|' .. seq .. '|' .. fence .. '|' .. tid, 'l', replica, 'p', prev, 'hd', over)
  return {seq, inc, fence, prev, over}
end
-- Puts the previous holder back after an unused turn.
local function restore_previous(st)
  local p = redis.call('HGET', st, 'p')
  if p and p ~= '' then redis.call('HSET', st, 'l', p) else redis.call('HDEL', st, 'l') end
end
-- With the turn free, hands it to the first live ticket. Another incarnation is told on its
-- own channel, grant included, so its waiter needs no round trip; a ticket of the caller's
-- incarnation is answered in the reply instead. Returns the grant, if any.
local function hand_over(st, q, prefix, wake, key, inc, free)
  if not free and live_holder(st, prefix) then return nil end
  local m = head(q, prefix, st)
  if not m then return nil end
  local g = grant(st, q, m)
  if g[2] ~= inc then
    redis.call('PUBLISH', wake .. g[2], key .. '\n' .. g[1] .. '\n' .. g[3] .. '\n' .. g[4] .. '\n' .. g[5])
    return nil
  end
  return g
end
-- After a turn was freed: hand it over, or let idle state expire. Returns a grant made to the
-- caller's own incarnation as `{seq, fence, prev, passed over}`, else `{}`.
-- `free`: the caller just cleared the holder itself, so there is none to check.
local function freed(st, q, prefix, wake, key, keep, inc, free)
  local g = hand_over(st, q, prefix, wake, key, inc, free)
  if g then return {g[1], g[3], g[4], g[5]} end
  if redis.call('HEXISTS', st, 'h') == 0 and redis.call('ZCARD', q) == 0 then
    redis.call('PEXPIRE', st, keep)
  end
  return {}
end
"#;

/// KEYS: state, queue. ARGV: incarnation, replica, alive prefix, lease ms, tid, wake prefix,
/// chat key, count. Takes `count` tickets in order. Returns their numbers, then the turn when
/// it went to one of this incarnation's tickets: `seq, fence, previous holder, passed over`,
/// or four ''.
pub(crate) const TAKE_TICKETS: &str = r#"
local st, q = KEYS[1], KEYS[2]
local inc, replica, prefix, lease, tid, wake, key = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]
redis.call('SET', prefix .. inc, '1', 'PX', lease, 'NX')
local out = {}
for i = 1, tonumber(ARGV[8]) do
  local seq = s(counter(st, 'n'))
  redis.call('ZADD', q, seq, seq .. '|' .. inc .. '|' .. tid .. '|' .. replica)
  out[i] = seq
end
redis.call('PERSIST', st)
local g = hand_over(st, q, prefix, wake, key, inc)
if g then
  table.insert(out, g[1]); table.insert(out, g[3]); table.insert(out, g[4]); table.insert(out, g[5])
else
  table.insert(out, ''); table.insert(out, ''); table.insert(out, ''); table.insert(out, '')
end
return out
"#;

/// KEYS: state, queue. ARGV: incarnation, alive prefix, seq, wake prefix, chat key.
/// Returns `{'granted', fence, prev, passed over}`, `{'gone'}`, or `{'wait'}` followed by a
/// grant made to another ticket of this incarnation (`seq, fence, prev, passed over`), if any.
pub(crate) const TRY_TURN: &str = r#"
local st, q = KEYS[1], KEYS[2]
local inc, prefix, seq, wake, key = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local mine = inc .. '|' .. seq .. '|'
local h = redis.call('HGET', st, 'h')
if h and string.sub(h, 1, #mine) == mine then
  local more = redis.call('HMGET', st, 'p', 'hd')
  return {'granted', string.match(h, '^[^|]*|[^|]*|([^|]*)'), more[1] or '', more[2] or ''}
end
if not member_of(q, seq, inc) then return {'gone'} end
local g = hand_over(st, q, prefix, wake, key, inc)
if g and g[1] == seq then return {'granted', g[3], g[4], g[5]} end
if g then return {'wait', g[1], g[3], g[4], g[5]} end
return {'wait'}
"#;

/// KEYS: state, queue. ARGV: incarnation, seq, used (1/0), keep ms, wake prefix, chat key,
/// alive prefix, hand back (1/0). Returns `{0}` when the turn was not ours, else `{1}`
/// followed by a grant the turn went on to for another ticket of this incarnation (`seq,
/// fence, prev, passed over`), if any.
pub(crate) const RELEASE: &str = r#"
local st, q = KEYS[1], KEYS[2]
local inc, seq, used, keep, wake, key, prefix = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]
local mine = inc .. '|' .. seq .. '|'
local h = redis.call('HMGET', st, 'h', 'p')
if not h[1] or string.sub(h[1], 1, #mine) ~= mine then return {0} end
if ARGV[8] == '1' then
  -- Handing back: whoever this turn was told about is passed on to the next grant too.
  passed(st, inc)
  for other in string.gmatch(redis.call('HGET', st, 'hd') or '', '[^,]+') do passed(st, other) end
end
if used == '0' then
  -- Put the previous holder back: this turn did nothing.
  if h[2] and h[2] ~= '' then redis.call('HSET', st, 'l', h[2]) else redis.call('HDEL', st, 'l') end
end
redis.call('HDEL', st, 'h', 'hd')
local g = freed(st, q, prefix, wake, key, keep, inc, true)
return {1, g[1], g[2], g[3], g[4]}
"#;

/// KEYS: state, queue. ARGV: incarnation, seq, keep ms, wake prefix, chat key, alive prefix.
/// Withdraws a ticket (or gives its turn back unused), naming this incarnation in the next
/// grant. Returns like [`RELEASE`].
pub(crate) const CANCEL: &str = r#"
local st, q = KEYS[1], KEYS[2]
local inc, seq, keep, wake, key, prefix = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local member = member_of(q, seq, inc)
if member then redis.call('ZREM', q, member) end
local mine = inc .. '|' .. seq .. '|'
local h = redis.call('HGET', st, 'h')
local held = h and string.sub(h, 1, #mine) == mine
if held then
  redis.call('HDEL', st, 'h')
  restore_previous(st)
end
-- A withdrawn ticket's message did not get its turn: the next holder takes it over, if it
-- was journaled.
if member or held then passed(st, inc) end
local g = freed(st, q, prefix, wake, key, keep, inc, false)
return {1, g[1], g[2], g[3], g[4]}
"#;

/// KEYS: state, queue. ARGV: incarnation, tid, keep ms, wake prefix, chat key, alive prefix.
/// Withdraws the ticket a `take_ticket` call with this tid made, when its reply was lost: the
/// queued ticket, or the turn it was granted (given back unused).
pub(crate) const ABANDON: &str = r#"
local st, q = KEYS[1], KEYS[2]
local inc, tid, keep, wake, key, prefix = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
for _, m in ipairs(redis.call('ZRANGE', q, 0, -1)) do
  local _, minc, mtid = fields(m)
  if minc == inc and mtid == tid then redis.call('ZREM', q, m) end
end
local h = redis.call('HGET', st, 'h')
if h and string.sub(h, 1, #inc + 1) == inc .. '|' and string.sub(h, -(#tid + 1)) == '|' .. tid then
  redis.call('HDEL', st, 'h')
  restore_previous(st)
end
local g = freed(st, q, prefix, wake, key, keep, inc, false)
return {1, g[1], g[2], g[3], g[4]}
"#;

/// KEYS: leadership. ARGV: incarnation, replica, alive prefix, lease ms.
/// Returns the fence, or false when a live other incarnation leads.
pub(crate) const TRY_LEAD: &str = r#"
local lk = KEYS[1]
local inc, replica, prefix, lease = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
redis.call('SET', prefix .. inc, '1', 'PX', lease, 'NX')
local cur = redis.call('HGET', lk, 'i')
if cur == inc then return redis.call('HGET', lk, 'g') end
if cur and alive(prefix, cur) then return false end
local fence = s(counter(lk, 'f'))
redis.call('HSET', lk, 'i', inc, 'r', replica, 'g', fence)
return fence
"#;

/// KEYS: leadership. ARGV: incarnation, fence. Returns 1 when it resigned.
pub(crate) const RESIGN: &str = r#"
if redis.call('HGET', KEYS[1], 'i') == ARGV[1] and redis.call('HGET', KEYS[1], 'g') == ARGV[2] then
  redis.call('HDEL', KEYS[1], 'i', 'r', 'g')
  return 1
end
return 0
"#;

/// KEYS: chat. ARGV: provider, now ms, lang or ''.
pub(crate) const UPSERT_CHAT: &str = r#"
local k = KEYS[1]
redis.call('HSETNX', k, 'first', ARGV[2])
local last = tonumber(redis.call('HGET', k, 'last') or '0')
if tonumber(ARGV[2]) > last then redis.call('HSET', k, 'last', ARGV[2]) end
redis.call('HSET', k, 'provider', ARGV[1])
if ARGV[3] ~= '' then redis.call('HSET', k, 'lang', ARGV[3]) end
return 1
"#;

/// KEYS: checkpoint. ARGV: mode ('any' | 'absent' | 'rev'), expected, data, ttl ms or '',
/// keep ms. Returns `{1, revision}` or `{0, current revision or ''}`.
pub(crate) const SET_CHECKPOINT: &str = r#"
local k = KEYS[1]
local mode, expected, data, ttl, keep = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local current = ''
if redis.call('HEXISTS', k, 'd') == 1 then current = redis.call('HGET', k, 'r') end
if mode == 'absent' and current ~= '' then return {0, current} end
if mode == 'rev' and current ~= expected then return {0, current} end
local rev = s(counter(k, 'r'))
redis.call('HSET', k, 'd', data)
if ttl ~= '' then redis.call('PEXPIRE', k, ttl) else redis.call('PERSIST', k) end
return {1, rev}
"#;

/// KEYS: checkpoint. ARGV: expected revision or '' for any, keep ms. Returns 1 when deleted.
pub(crate) const CLEAR_CHECKPOINT: &str = r#"
local k = KEYS[1]
if redis.call('HEXISTS', k, 'd') == 0 then return 0 end
if ARGV[1] ~= '' and redis.call('HGET', k, 'r') ~= ARGV[1] then return 0 end
redis.call('HDEL', k, 'd')
redis.call('PEXPIRE', k, ARGV[2])
return 1
"#;

/// KEYS: lock. ARGV: token, ttl ms. Returns the fence, or false when held.
pub(crate) const ACQUIRE_LOCK: &str = r#"
local k = KEYS[1]
if redis.call('HEXISTS', k, 't') == 1 then return false end
local fence = s(counter(k, 'f'))
redis.call('HSET', k, 't', ARGV[1])
redis.call('PEXPIRE', k, ARGV[2])
return fence
"#;

/// KEYS: lock. ARGV: token, ttl ms. Returns 1 when renewed.
pub(crate) const RENEW_LOCK: &str = r#"
if redis.call('HGET', KEYS[1], 't') ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"#;

/// KEYS: lock. ARGV: token, keep ms. Returns 1 when released.
pub(crate) const RELEASE_LOCK: &str = r#"
if redis.call('HGET', KEYS[1], 't') ~= ARGV[1] then return 0 end
redis.call('HDEL', KEYS[1], 't')
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"#;

/// KEYS: lease. ARGV: holder, ttl ms. Returns the fence, or false when another holds it.
pub(crate) const ACQUIRE_LEASE: &str = r#"
local k = KEYS[1]
local holder = redis.call('HGET', k, 'h')
if holder and holder ~= ARGV[1] then return false end
if holder == ARGV[1] then
  redis.call('PEXPIRE', k, ARGV[2])
  return redis.call('HGET', k, 'g')
end
local fence = s(counter(k, 'f'))
redis.call('HSET', k, 'h', ARGV[1], 'g', fence)
redis.call('PEXPIRE', k, ARGV[2])
return fence
"#;

/// KEYS: lease. ARGV: holder, ttl ms. Returns 1 when renewed.
pub(crate) const RENEW_LEASE: &str = r#"
if redis.call('HGET', KEYS[1], 'h') ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"#;

/// KEYS: lease. ARGV: holder, keep ms. Returns 1 when released.
pub(crate) const RELEASE_LEASE: &str = r#"
if redis.call('HGET', KEYS[1], 'h') ~= ARGV[1] then return 0 end
redis.call('HDEL', KEYS[1], 'h', 'g')
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"#;

/// KEYS: record, pending index, sequence. ARGV: id, key, payload, owner, state, retain ms.
/// Returns 'new' or the existing record's state.
pub(crate) const INBOX_APPEND: &str = r#"
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
"#;

/// KEYS: record, pending index. ARGV: id.
pub(crate) const INBOX_ACK: &str = r#"
local retain = redis.call('HGET', KEYS[1], 'n')
if not retain then return 0 end
redis.call('HSET', KEYS[1], 's', 'acked')
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('PEXPIRE', KEYS[1], retain)
return 1
"#;

/// KEYS: record. ARGV: from, to. Returns 1 when claimed.
pub(crate) const INBOX_CLAIM: &str = r#"
if redis.call('HGET', KEYS[1], 's') ~= 'pending' or redis.call('HGET', KEYS[1], 'o') ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'o', ARGV[2])
return 1
"#;

/// KEYS: pending index. ARGV: limit, record key prefix.
/// Returns a flat list of id, key, payload, owner for each pending record, oldest first.
pub(crate) const INBOX_PENDING: &str = r#"
local out = {}
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)) do
  local f = redis.call('HMGET', ARGV[2] .. id, 'k', 'p', 'o')
  if f[1] then
    table.insert(out, id); table.insert(out, f[1]); table.insert(out, f[2]); table.insert(out, f[3])
  else
    -- The record is gone (it expired): so is its place in the index.
    redis.call('ZREM', KEYS[1], id)
  end
end
return out
"#;

/// Prepends the shared helpers to a script body.
pub(crate) fn with_prelude(body: &str) -> String {
    format!("{PRELUDE}\n{body}")
}
