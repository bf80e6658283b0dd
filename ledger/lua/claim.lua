-- A run claims its turn (Step.CLAIM): if it is the turn's pending run and the turn is in a status
-- a claim is allowed from, it takes the turn under epoch E+1, records its run_started at stream id
-- (E+1)-0 and, optionally, reads the turn from a stream id — one atomic step and one round trip,
-- so a chunk starts with its snapshot in hand.
--
-- The run_started is the codec's JSON (the codec is the only writer of event JSON), encoded by the
-- caller with placeholders for what only the metadata knows: "chunk":0, "cause":"first" and
-- "epoch":0 are set here to the pending run's chunk and cause and to E+1. Each is the first match
-- of its key in the JSON: a key's quotes cannot occur unescaped inside a string value.
--
-- KEYS[1] stream, KEYS[2] meta hash, KEYS[3] the turn's Stop flag, KEYS[4] (optional) the
-- reaper's index: given on one server, where the look at the lease's end goes with the claim; a
-- cluster's caller adds it after (a key of no turn's slot)
-- ARGV[1] run id, ARGV[2] run_started payload, ARGV[3] lease deadline (ms)
-- ARGV[4] the status a claim leads to
-- ARGV[5] stream id to read from once claimed ('' = no read), ARGV[6] at most that many entries
-- ARGV[7] number of statuses a claim is allowed from, then those statuses, then the number of
-- causes a run may have, then those causes
-- Returns {1, meta before, stop flag, E+1[, entries]} when claimed, {0, meta, stop flag} when
-- not (another run is pending, or the status does not allow it). Errors: NOTURN; CORRUPT <field>
-- when the pending run's chunk or cause is not one a run_started may carry.
if redis.call('EXISTS', KEYS[2]) == 0 then
  return redis.error_reply('NOTURN')
end
local before = redis.call('HGETALL', KEYS[2])
local stop = redis.call('EXISTS', KEYS[3])
if (redis.call('HGET', KEYS[2], 'next_run') or '') ~= ARGV[1] then
  return {0, before, stop}
end
local status = redis.call('HGET', KEYS[2], 'status') or ''
local allowed = false
local statuses = tonumber(ARGV[7])
for k = 8, 7 + statuses do
  if ARGV[k] == status then
    allowed = true
  end
end
if not allowed then
  return {0, before, stop}
end
local chunk = redis.call('HGET', KEYS[2], 'next_chunk') or '0'
if not string.match(chunk, '^%d+$') then
  return redis.error_reply('CORRUPT next_chunk')
end
local cause = redis.call('HGET', KEYS[2], 'next_cause') or 'first'
local known = false
for k = 9 + statuses, 8 + statuses + tonumber(ARGV[8 + statuses]) do
  if ARGV[k] == cause then
    known = true
  end
end
if not known then
  return redis.error_reply('CORRUPT next_cause')
end
local epoch = redis.call('HINCRBY', KEYS[2], 'epoch', 1)
local started = string.gsub(ARGV[2], '"chunk":0,', '"chunk":' .. chunk .. ',', 1)
started = string.gsub(started, '"cause":"first"', '"cause":"' .. cause .. '"', 1)
started = string.gsub(started, '"epoch":0', '"epoch":' .. epoch, 1)
redis.call('XADD', KEYS[1], epoch .. '-0', 'e', started)
redis.call('HINCRBY', KEYS[2], 'runs', 1)
if KEYS[4] then
  redis.call('ZADD', KEYS[4], ARGV[3], string.match(KEYS[2], '{([^}]*)}'))
end
redis.call('HSET', KEYS[2], 'run_id', ARGV[1], 'chunk', chunk, 'next_run', '',
  'status', ARGV[4], 'lease_until', ARGV[3])
if ARGV[5] ~= '' then
  return {1, before, stop, epoch, redis.call('XRANGE', KEYS[1], ARGV[5], '+', 'COUNT', ARGV[6])}
end
return {1, before, stop, epoch}
