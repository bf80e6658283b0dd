-- Claim the turn's pending run: the run recorded as next_run becomes the lease holder with a new
-- epoch. Any other run id (a duplicate delivery, a run already claimed, a stale message) claims
-- nothing, so at most one run ever holds a given epoch.
--
-- KEYS[1] stream, KEYS[2] meta hash, KEYS[3] event-id index hash
-- ARGV[1] run_id, ARGV[2] lease deadline (ms since the epoch)
-- Returns {1, epoch, chunk} when claimed, {0, status, holder run_id} otherwise. Error: NOTURN.
if redis.call('EXISTS', KEYS[2]) == 0 then
  return redis.error_reply('NOTURN')
end
local next_run = redis.call('HGET', KEYS[2], 'next_run')
if next_run ~= ARGV[1] then
  return {0, redis.call('HGET', KEYS[2], 'status') or '', redis.call('HGET', KEYS[2], 'run_id') or ''}
end
local epoch = redis.call('HINCRBY', KEYS[2], 'epoch', 1)
local chunk = redis.call('HGET', KEYS[2], 'next_chunk') or '0'
redis.call('HINCRBY', KEYS[2], 'runs', 1)
redis.call('HSET', KEYS[2], 'run_id', ARGV[1], 'chunk', chunk, 'next_run', '',
  'status', 'running', 'lease_until', ARGV[2])
return {1, epoch, tonumber(chunk)}
