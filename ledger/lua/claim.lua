-- A run claims its turn (Step.CLAIM): if it is the turn's pending run and the turn is in a
-- status the claim is allowed from, it takes the turn under a new lease epoch, records its
-- run_started at stream id E-0 and, optionally, reads the turn from a stream id — one atomic step
-- and one round trip, so a chunk starts with its snapshot in hand.
--
-- The caller cannot know the event's chunk, cause and epoch before this step (they come from the
-- metadata), so it sends the event's JSON without them and without its closing brace; they are
-- appended here. next_cause is one of dres's own words; anything else is refused, not written.
--
-- KEYS[1] stream, KEYS[2] meta hash, KEYS[3] the turn's Stop flag
-- ARGV[1] run id, ARGV[2] run_started JSON head (no chunk, cause, epoch, no closing brace)
-- ARGV[3] lease deadline (ms), ARGV[4] the status a claim leads to
-- ARGV[5] stream id to read from once claimed ('' = no read), ARGV[6] at most that many entries
-- ARGV[7] number of statuses a claim is allowed from, then those statuses
-- Returns {1, meta before, stop flag, E+1[, entries]} when claimed, {0, meta, stop flag} when
-- run id is not the pending run or the status does not allow a claim. Errors: NOTURN, BADCAUSE.
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
for k = 8, 7 + tonumber(ARGV[7]) do
  if ARGV[k] == status then
    allowed = true
  end
end
if not allowed then
  return {0, before, stop}
end
local cause = redis.call('HGET', KEYS[2], 'next_cause') or 'first'
if not string.match(cause, '^[%w_]+$') then
  return redis.error_reply('BADCAUSE ' .. cause)
end
local chunk = tonumber(redis.call('HGET', KEYS[2], 'next_chunk') or
  redis.call('HGET', KEYS[2], 'chunk') or '0')
local epoch = redis.call('HINCRBY', KEYS[2], 'epoch', 1)
local event = ARGV[2] .. ',"chunk":' .. string.format('%d', chunk) .. ',"cause":"' .. cause ..
  '","epoch":' .. epoch .. '}'
redis.call('XADD', KEYS[1], epoch .. '-0', 'e', event)
redis.call('HINCRBY', KEYS[2], 'runs', 1)
redis.call('HSET', KEYS[2], 'run_id', ARGV[1], 'chunk', string.format('%d', chunk),
  'next_run', '', 'status', ARGV[4], 'lease_until', ARGV[3])
if ARGV[5] ~= '' then
  return {1, before, stop, epoch, redis.call('XRANGE', KEYS[1], ARGV[5], '+', 'COUNT', ARGV[6])}
end
return {1, before, stop, epoch}
