-- Take the turn under a new lease epoch, if it is in the state the caller expects.
--
-- Every change of who holds a turn but a run's own claim (claim.lua) goes through here: the reaper
-- taking over from a dead run, a Stop or a Continue acting on a turn no run holds. Checks and
-- writes are one atomic step: the epoch goes from E to E+1 and the given events are written at
-- stream ids (E+1)-0, (E+1)-1, ... so from then on every append of an older epoch is refused by
-- XADD itself.
--
-- KEYS[1] stream, KEYS[2] meta hash
-- ARGV[1] seconds to keep the turn's keys from now (0: leave as is, -1: keep them for good)
-- ARGV[2] number of conditions c, then c pairs (meta field, expected value; '' = unset)
-- then the number of events n, then n payloads, then pairs (meta field, value) to set
-- Returns {1, E+1} when taken, {0, field} naming the first condition that failed. Error: NOTURN.
if redis.call('EXISTS', KEYS[2]) == 0 then
  return redis.error_reply('NOTURN')
end
local i = 3
for _ = 1, tonumber(ARGV[2]) do
  local value = redis.call('HGET', KEYS[2], ARGV[i]) or ''
  if value ~= ARGV[i + 1] then
    return {0, ARGV[i]}
  end
  i = i + 2
end
local epoch = redis.call('HINCRBY', KEYS[2], 'epoch', 1)
local n = tonumber(ARGV[i])
i = i + 1
for k = 0, n - 1 do
  redis.call('XADD', KEYS[1], epoch .. '-' .. k, 'e', ARGV[i])
  i = i + 1
end
if i <= #ARGV then
  redis.call('HSET', KEYS[2], unpack(ARGV, i))
end
local ttl = tonumber(ARGV[1])
for _, key in ipairs(KEYS) do
  if ttl > 0 then
    redis.call('EXPIRE', key, ttl)
  elseif ttl < 0 then
    redis.call('PERSIST', key)
  end
end
return {1, epoch}
