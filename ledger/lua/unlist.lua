-- Take a conversation off the list of conversations, unless it was updated since the caller
-- read it (a new message moved its score), so a racing message keeps it listed.
--
-- KEYS[1] the sorted set of conversations
-- ARGV[1] the conversation id, ARGV[2] its score as the caller read it
-- Returns 1 when removed, 0 when it was updated meanwhile or was not listed.
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score or tonumber(score) ~= tonumber(ARGV[2]) then
  return 0
end
return redis.call('ZREM', KEYS[1], ARGV[1])
