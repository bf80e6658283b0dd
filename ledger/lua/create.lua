-- Create a turn: its metadata (queued, epoch 0, the first run pending) and its first event,
-- atomically, once. A repeat with the same turn id changes nothing.
--
-- KEYS[1] stream, KEYS[2] meta hash, KEYS[3] event-id index hash
-- ARGV[1] event_id, ARGV[2] payload of turn_started, then pairs (meta field, value)
-- Returns {1, stream id} when created, {0, status} when the turn already existed.
if redis.call('EXISTS', KEYS[2]) == 1 then
  return {0, redis.call('HGET', KEYS[2], 'status') or ''}
end
redis.call('HSET', KEYS[2], 'epoch', '0', 'runs', '0', 'chunk', '0', unpack(ARGV, 3))
local sid = redis.call('XADD', KEYS[1], '*', 'e', ARGV[2])
redis.call('HSET', KEYS[3], ARGV[1], sid)
return {1, sid}
