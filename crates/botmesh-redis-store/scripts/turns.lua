-- A batch of takes and releases, each on its own chat, run in order (see `take` and
-- `release` in the prelude).
-- KEYS: per operation, the chat's state and queue.
-- ARGV: incarnation, replica, alive prefix, lease ms, wake prefix, then per operation either
-- 't', chat key, count, tid; or 'r', chat key, seq, through, used (1/0), keep ms, hand back
-- (1/0).
-- Returns, per operation, the length of its reply, then the reply.
local inc, replica, prefix, lease, wake = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local out, a, k, registered = {}, 6, 1, false
local function emit(reply)
  table.insert(out, #reply)
  for _, v in ipairs(reply) do table.insert(out, v) end
end
while a <= #ARGV do
  local st, q, key = KEYS[k], KEYS[k + 1], ARGV[a + 1]
  k = k + 2
  if ARGV[a] == 't' then
    if not registered then
      -- Tickets of an incarnation without a liveness key would be skipped as dead.
      redis.call('SET', prefix .. inc, '1', 'PX', lease, 'NX')
      registered = true
    end
    emit(take(st, q, inc, replica, prefix, wake, key, tonumber(ARGV[a + 2]), ARGV[a + 3]))
    a = a + 4
  else
    emit(release(st, q, inc, ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 5], wake, key, prefix, ARGV[a + 6]))
    a = a + 7
  end
end
return out
