-- A schedule's steps (docs/semantics.md, schedules): make it, claim its due tick, advance it past
-- the tick, delete it. Each step is one script, so any number of workers' reapers look at the
-- same schedule at once and one tick is fired by one of them at a time.
--
-- KEYS[1] the schedule's hash, KEYS[2] the due index (zset id -> next tick, ms), KEYS[3] the
-- listing (zset id -> made, ms); all in the one slot {schedules}
-- ARGV[1] op: make | claim | advance | delete, ARGV[2] the schedule's id
-- make: ARGV[3] next tick (ms, '' none), ARGV[4] made (ms), ARGV[5..] pairs (field, value).
--   Returns 1 made, 0 when the id is taken (nothing changed).
-- claim: ARGV[3] the tick as read (next_at), ARGV[4] now (ms), ARGV[5] the claim's ms,
--   ARGV[6] the tick this claim would fire ('' none). Only while next_at is still that tick and
--   no unexpired claim is held. Returns {1, tick to fire} (an expired claim's own choice, kept,
--   so a repeat after a crash fires the same tick, whose turn it then finds), or {0}.
-- advance: ARGV[3] the tick as read, ARGV[4] the next tick ('' none: spent), ARGV[5] the turn
--   it started ('' none). Only while next_at is still that tick. Returns 1 done, 0 not.
-- delete: Returns 1 deleted, 0 when there was none.
local hash, due, listed = KEYS[1], KEYS[2], KEYS[3]
local op, id = ARGV[1], ARGV[2]

if op == 'make' then
  if redis.call('EXISTS', hash) == 1 then
    return 0
  end
  redis.call('HSET', hash, 'next_at', ARGV[3], unpack(ARGV, 5))
  redis.call('ZADD', listed, ARGV[4], id)
  if ARGV[3] ~= '' then
    redis.call('ZADD', due, ARGV[3], id)
  end
  return 1
end

if op == 'delete' then
  local existed = redis.call('DEL', hash)
  redis.call('ZREM', due, id)
  redis.call('ZREM', listed, id)
  return existed
end

local state = redis.call('HMGET', hash, 'next_at', 'claim_until', 'firing')
if state[1] == false or state[1] ~= ARGV[3] then
  return op == 'claim' and {0} or 0
end

if op == 'claim' then
  local now = tonumber(ARGV[4])
  if state[2] and tonumber(state[2]) > now then
    return {0}
  end
  local firing = state[3] or ARGV[6]
  redis.call('HSET', hash, 'claim_until', string.format('%.0f', now + tonumber(ARGV[5])),
    'firing', firing)
  return {1, firing}
end

if op == 'advance' then
  redis.call('HSET', hash, 'next_at', ARGV[4])
  if ARGV[5] ~= '' then
    redis.call('HSET', hash, 'last_turn_id', ARGV[5])
  end
  redis.call('HDEL', hash, 'claim_until', 'firing')
  if ARGV[4] ~= '' then
    redis.call('ZADD', due, ARGV[4], id)
  else
    redis.call('ZREM', due, id)
  end
  return 1
end

return redis.error_reply('unknown op ' .. op)
