-- Take back a turn that was created and went no further: while it is still queued at epoch 0 (no
-- run claimed it, no step of its state machine wrote to it), its stream and metadata are deleted.
-- Deletes only, which Redis allows when it is out of memory, one of the failures this is for.
--
-- KEYS[1] stream, KEYS[2] meta hash
-- ARGV[1] the status of a created turn
-- Returns 1 when there is no such turn now (withdrawn, or never made), 0 when it went on.
if redis.call('EXISTS', KEYS[2]) == 0 and redis.call('EXISTS', KEYS[1]) == 0 then
  return 1
end
local meta = redis.call('HMGET', KEYS[2], 'status', 'epoch')
if meta[1] ~= ARGV[1] or meta[2] ~= '0' then
  return 0
end
redis.call('DEL', KEYS[1], KEYS[2])
return 1
