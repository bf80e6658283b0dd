-- The reaper's look at its due turns: the ones whose look has come (oldest first, at most a
-- count), each put off by a hold in the same atomic step, so that the reapers of many workers
-- sweeping at once each take other turns; a look at a turn sets its next look itself, and a
-- reaper that dies with turns taken leaves them to be looked at once their hold runs out.
--
-- KEYS[1] the reaper's index
-- ARGV[1] now (ms), ARGV[2] the most turns taken, ARGV[3] the hold (ms)
-- Returns the turn ids taken.
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
local held = tonumber(ARGV[1]) + tonumber(ARGV[3])
for _, turn_id in ipairs(due) do
  redis.call('ZADD', KEYS[1], 'XX', held, turn_id)
end
return due
