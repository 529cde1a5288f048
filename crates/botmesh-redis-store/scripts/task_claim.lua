-- Claims an occurrence of a durable task when it is later than the last one claimed.
-- Occurrences travel as decimal strings without leading zeros, so they compare by length,
-- then digit by digit, whatever their size.
local last = redis.call('GET', KEYS[1])
local occurrence = ARGV[1]
if last and (#last > #occurrence or (#last == #occurrence and last >= occurrence)) then
  return 0
end
redis.call('SET', KEYS[1], occurrence)
return 1
