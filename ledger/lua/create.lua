-- Create a turn once: its metadata (queued, epoch 0, the first run pending) and its first event
-- at stream id 0-1. A repeat with the same turn id changes nothing.
--
-- KEYS[1] stream, KEYS[2] meta hash
-- ARGV[1] payload of turn_started, then pairs (meta field, value)
-- Returns 1 when created, 0 when the turn already existed.
if redis.call('EXISTS', KEYS[2]) == 1 or redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('HSET', KEYS[2], 'epoch', '0', 'runs', '0', 'chunk', '0', unpack(ARGV, 2))
redis.call('XADD', KEYS[1], '0-1', 'e', ARGV[1])
return 1
