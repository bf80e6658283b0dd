-- Claim the turn's pending run. Only the run recorded as next_run can claim, once: it gets the
-- next lease epoch E and its run_started event is written at stream id E-0 in the same step.
-- From then on every append of an older epoch (ids E'-n with E' < E) is refused by XADD itself,
-- so a zombie run can never write after the turn was taken over.
--
-- KEYS[1] stream, KEYS[2] meta hash
-- ARGV[1] run_id, ARGV[2] lease deadline (ms since the epoch), ARGV[3] the epoch the caller
-- read (E - 1), ARGV[4] payload of run_started, built for epoch E
-- Returns {1, E, chunk} when claimed, {0, status, holder run_id} otherwise. Error: NOTURN.
if redis.call('EXISTS', KEYS[2]) == 0 then
  return redis.error_reply('NOTURN')
end
local meta = redis.call('HMGET', KEYS[2], 'next_run', 'epoch', 'status', 'run_id', 'next_chunk')
if meta[1] ~= ARGV[1] or meta[2] ~= ARGV[3] then
  return {0, meta[3] or '', meta[4] or ''}
end
local epoch = redis.call('HINCRBY', KEYS[2], 'epoch', 1)
local chunk = meta[5] or '0'
redis.call('XADD', KEYS[1], epoch .. '-0', 'e', ARGV[4])
redis.call('HINCRBY', KEYS[2], 'runs', 1)
redis.call('HSET', KEYS[2], 'run_id', ARGV[1], 'chunk', chunk, 'next_run', '',
  'status', 'running', 'lease_until', ARGV[2])
return {1, epoch, tonumber(chunk)}
