-- Fenced append of events with metadata updates and optional expiry, in one atomic step (the
-- rare writes that must change the turn's metadata too: a handover, the end of a turn).
-- Plain appends skip this script: a single XADD with an explicit id is fenced by itself.
--
-- KEYS[1] stream, KEYS[2] meta hash
-- ARGV[1] lease epoch the caller holds
-- ARGV[2] seconds to keep the turn's keys from now (0: no expiry)
-- ARGV[3] number of events n, then n pairs (stream id, payload), then pairs (meta field, value)
-- An event whose id is already in the stream is not added again (a retry of this very call).
-- Errors: NOTURN, FENCED <current epoch>, BEHIND <top id> (the caller's sequence lags the stream).
local current = redis.call('HGET', KEYS[2], 'epoch')
if not current then
  return redis.error_reply('NOTURN')
end
if current ~= ARGV[1] then
  return redis.error_reply('FENCED ' .. current)
end
local function parse(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end
local top = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
local top_ms, top_seq = -1, -1
if top[1] then
  top_ms, top_seq = parse(top[1][1])
end
local n = tonumber(ARGV[3])
local i = 4
for _ = 1, n do
  local ms, seq = parse(ARGV[i])
  if ms > top_ms or (ms == top_ms and seq > top_seq) then
    redis.call('XADD', KEYS[1], ARGV[i], 'e', ARGV[i + 1])
    top_ms, top_seq = ms, seq
  elseif #redis.call('XRANGE', KEYS[1], ARGV[i], ARGV[i]) == 0 then
    return redis.error_reply('BEHIND ' .. top_ms .. '-' .. top_seq)
  end
  i = i + 2
end
if i <= #ARGV then
  redis.call('HSET', KEYS[2], unpack(ARGV, i))
end
local ttl = tonumber(ARGV[2])
if ttl > 0 then
  redis.call('EXPIRE', KEYS[1], ttl)
  redis.call('EXPIRE', KEYS[2], ttl)
end
return n
