-- Erase a finished turn for good (a person asked for its conversation to be deleted): while its
-- status is one of the ended ones, every key of the turn is deleted in one step, so a Continue
-- that races the erase either comes first (and the erase is refused) or finds no turn.
--
-- KEYS[1] stream, KEYS[2] meta hash, then the turn's other keys (Stop flag, durability marker)
-- ARGV the statuses of an ended turn
-- Returns 'erased', 'gone' (no such turn now) or the status that refused the erase.
if redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('DEL', unpack(KEYS))
  return 'gone'
end
local status = redis.call('HGET', KEYS[2], 'status') or ''
for _, ended in ipairs(ARGV) do
  if status == ended then
    redis.call('DEL', unpack(KEYS))
    return 'erased'
  end
end
return status
