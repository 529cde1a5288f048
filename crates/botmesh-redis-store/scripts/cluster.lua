-- Reads, changing nothing: the holders of the leadership hashes in KEYS and, when a document
-- prefix is given, the kept status documents of the index (the last key). Liveness is read
-- too when an alive prefix is given, which every key of the call must share a slot with.
local alive_prefix, doc_prefix = ARGV[1], ARGV[2]
local function liveness(inc)
  if alive_prefix == '' then return '' end
  return alive(alive_prefix, inc) and '1' or '0'
end
local replicas, leaders = {}, {}
local leads = #KEYS
if doc_prefix ~= '' then
  leads = leads - 1
  local now = clock_ms()
  for _, inc in ipairs(redis.call('ZRANGEBYSCORE', KEYS[#KEYS], '(' .. s(now), '+inf')) do
    local d = redis.call('HMGET', doc_prefix .. inc, 'r', 's', 't')
    if d[1] and d[2] and d[3] then
      local age = math.max(0, now - (tonumber(d[3]) or now))
      for _, v in ipairs({inc, d[1], d[2], s(age), liveness(inc)}) do
        replicas[#replicas + 1] = v
      end
    end
  end
end
for n = 1, leads do
  local h = redis.call('HMGET', KEYS[n], 'i', 'r', 'g')
  if h[1] and h[2] and h[3] then
    for _, v in ipairs({tostring(n), h[1], h[2], h[3], liveness(h[1])}) do
      leaders[#leaders + 1] = v
    end
  end
end
return {replicas, leaders}
