-- Fenced, idempotent append of events to a turn's stream, with optional metadata updates and
-- expiry, all in one atomic step.
--
-- KEYS[1] stream, KEYS[2] meta hash, KEYS[3] event-id index hash
-- ARGV[1] lease epoch the caller holds
-- ARGV[2] seconds to keep the turn's keys from now (0: no expiry)
-- ARGV[3] number of events n, then n pairs (event_id, payload)
-- then pairs (meta field, value) to set
-- Returns the stream ids, one per event; an event id already recorded returns its first id and
-- adds nothing (a retried append after an interrupted XADD). Errors: NOTURN, FENCED <current>.
local current = redis.call('HGET', KEYS[2], 'epoch')
if not current then
  return redis.error_reply('NOTURN')
end
if current ~= ARGV[1] then
  return redis.error_reply('FENCED ' .. current)
end
local n = tonumber(ARGV[3])
local ids = {}
local i = 4
for k = 1, n do
  local eid = ARGV[i]
  local existing = redis.call('HGET', KEYS[3], eid)
  if existing then
    ids[k] = existing
  else
    local sid = redis.call('XADD', KEYS[1], '*', 'e', ARGV[i + 1])
    redis.call('HSET', KEYS[3], eid, sid)
    ids[k] = sid
  end
  i = i + 2
end
if i <= #ARGV then
  redis.call('HSET', KEYS[2], unpack(ARGV, i))
end
local ttl = tonumber(ARGV[2])
if ttl > 0 then
  for _, key in ipairs(KEYS) do
    redis.call('EXPIRE', key, ttl)
  end
end
return ids
