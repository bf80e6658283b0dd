-- One step of a turn's state machine (ledger/turn.py): check the from-status and the caller's
-- conditions, then write the step's events under a new lease epoch and set the metadata, in one
-- atomic step that touches only this turn's keys.
--
-- Events are written at stream ids (E+1)-0, (E+1)-1, ... after the epoch is bumped, so from then
-- on every XADD of an older epoch is refused by Redis itself: a run whose turn was ended, handed
-- over or taken over cannot append after it. A step without events leaves the epoch alone.
--
-- A step may send a message with it (a hand-over, its successor's): the message is pushed onto a
-- list of the same server, its presence marked, and the reaper's look at the turn set, only when
-- the step is taken, and in the same atomic step — so the step is recorded before its message
-- exists, and no crash falls between the two. The script does not read the message.
--
-- KEYS[1] stream, KEYS[2] meta hash; with a message also KEYS[3] the list it is pushed onto,
-- KEYS[4] its mark, KEYS[5] the reaper's index
-- ARGV[1] the step's name, ARGV[2] the status it leads to ('': the status stays)
-- ARGV[3] seconds to keep the turn's keys from now (0: leave as is, -1: keep them for good)
-- ARGV[4] number of allowed from-statuses f, then f statuses
-- then the number of conditions c, then c pairs (meta field, expected value; '' = unset)
-- then the number of events n, then n payloads
-- then the number of messages (0 or 1), then for one: the message, its mark's TTL (s), and the
-- ms time of the reaper's look (set unless a sooner one is)
-- then pairs (meta field, value) to set
-- Returns the epoch after the step. Errors: NOTURN, REFUSED <status>, CHANGED <field> <value>.
if redis.call('EXISTS', KEYS[2]) == 0 then
  return redis.error_reply('NOTURN')
end
local status = redis.call('HGET', KEYS[2], 'status') or ''
local i = 5
local allowed = false
for _ = 1, tonumber(ARGV[4]) do
  if ARGV[i] == status then
    allowed = true
  end
  i = i + 1
end
if not allowed then
  return redis.error_reply('REFUSED ' .. status)
end
local conditions = tonumber(ARGV[i])
i = i + 1
for _ = 1, conditions do
  local value = redis.call('HGET', KEYS[2], ARGV[i]) or ''
  if value ~= ARGV[i + 1] then
    return redis.error_reply('CHANGED ' .. ARGV[i] .. ' ' .. value)
  end
  i = i + 2
end
local n = tonumber(ARGV[i])
i = i + 1
local epoch
if n > 0 then
  epoch = redis.call('HINCRBY', KEYS[2], 'epoch', 1)
  for k = 0, n - 1 do
    redis.call('XADD', KEYS[1], epoch .. '-' .. k, 'e', ARGV[i])
    i = i + 1
  end
else
  epoch = tonumber(redis.call('HGET', KEYS[2], 'epoch') or '0')
end
local message = nil
if tonumber(ARGV[i]) == 1 then
  message = {ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]}
  i = i + 4
else
  i = i + 1
end
if ARGV[2] ~= '' then
  redis.call('HSET', KEYS[2], 'status', ARGV[2])
end
if i <= #ARGV then
  redis.call('HSET', KEYS[2], unpack(ARGV, i))
end
local ttl = tonumber(ARGV[3])
-- A turn that ends (its keys expire from now) gives back the room its stream holds for entries
-- to come: Redis keeps the newest node of a stream at 4 KB for its next entries, most of a short
-- turn's memory. A stream written anew from its own dump is packed tight (same ids, same
-- entries); a long one, where that room counts for little, is left as it is. Where DUMP or
-- RESTORE is refused (no memory for the copy), the stream simply stays as it was.
if ttl > 0 and redis.call('XLEN', KEYS[1]) <= 1000 then
  local dumped = redis.pcall('DUMP', KEYS[1])
  if type(dumped) == 'string' then
    redis.pcall('RESTORE', KEYS[1], ttl * 1000, dumped, 'REPLACE')
  end
end
for k = 1, 2 do
  if ttl > 0 then
    redis.call('EXPIRE', KEYS[k], ttl)
  elseif ttl < 0 then
    redis.call('PERSIST', KEYS[k])
  end
end
if message then
  redis.call('LPUSH', KEYS[3], message[1])
  redis.call('SET', KEYS[4], '1', 'EX', message[2])
  redis.call('ZADD', KEYS[5], 'LT', message[3], string.match(KEYS[2], '{([^}]*)}'))
end
return epoch
