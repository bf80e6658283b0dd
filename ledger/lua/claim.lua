-- A run claims its turn (Step.CLAIM): if it is the turn's pending run, the turn is in a status a
-- claim is allowed from and its epoch is still the one the caller read, it takes the turn under
-- epoch E+1, records its run_started (encoded by the codec from that same read: the codec is the
-- only writer of event JSON) at stream id (E+1)-0 and, optionally, reads the turn from a stream
-- id — one atomic step, so a chunk starts with its snapshot in hand.
--
-- KEYS[1] stream, KEYS[2] meta hash, KEYS[3] the turn's Stop flag
-- ARGV[1] run id, ARGV[2] run_started payload, ARGV[3] lease deadline (ms)
-- ARGV[4] the status a claim leads to, ARGV[5] the epoch the caller read
-- ARGV[6] stream id to read from once claimed ('' = no read), ARGV[7] at most that many entries
-- ARGV[8] number of statuses a claim is allowed from, then those statuses
-- Returns {1, meta before, stop flag, E+1[, entries]} when claimed, {0, meta, stop flag} when
-- not (another run is pending, the status does not allow it, or the turn moved on since the
-- caller read it). Error: NOTURN.
if redis.call('EXISTS', KEYS[2]) == 0 then
  return redis.error_reply('NOTURN')
end
local before = redis.call('HGETALL', KEYS[2])
local stop = redis.call('EXISTS', KEYS[3])
if (redis.call('HGET', KEYS[2], 'next_run') or '') ~= ARGV[1] then
  return {0, before, stop}
end
if (redis.call('HGET', KEYS[2], 'epoch') or '0') ~= ARGV[5] then
  return {0, before, stop}
end
local status = redis.call('HGET', KEYS[2], 'status') or ''
local allowed = false
for k = 9, 8 + tonumber(ARGV[8]) do
  if ARGV[k] == status then
    allowed = true
  end
end
if not allowed then
  return {0, before, stop}
end
local epoch = redis.call('HINCRBY', KEYS[2], 'epoch', 1)
redis.call('XADD', KEYS[1], epoch .. '-0', 'e', ARGV[2])
redis.call('HINCRBY', KEYS[2], 'runs', 1)
local chunk = redis.call('HGET', KEYS[2], 'next_chunk') or '0'
redis.call('HSET', KEYS[2], 'run_id', ARGV[1], 'chunk', chunk, 'next_run', '',
  'status', ARGV[4], 'lease_until', ARGV[3])
if ARGV[6] ~= '' then
  return {1, before, stop, epoch, redis.call('XRANGE', KEYS[1], ARGV[6], '+', 'COUNT', ARGV[7])}
end
return {1, before, stop, epoch}
