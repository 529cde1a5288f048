local function s(n) return string.format('%.0f', n) end
local function clock_us()
  local t = redis.call('TIME')
  return t[1] .. string.format('%06d', tonumber(t[2]))
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
