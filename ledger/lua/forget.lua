-- Forget a conversation whose turns are gone (expired, or erased on request): its list of turns
-- and its metadata go, unless a new turn joined it meanwhile (the list's newest is not the one
-- the caller found gone), so a message that races the forgetting is never lost.
--
-- KEYS[1] the conversation's list of turns, KEYS[2] its metadata hash, KEYS[3] its line
-- ARGV[1] the newest turn the caller found gone ('' when it found the list empty)
-- Returns 1 when forgotten, 0 when the conversation went on.
local newest = redis.call('LINDEX', KEYS[1], -1) or ''
if newest ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
return 1
