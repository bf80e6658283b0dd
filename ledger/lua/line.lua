-- Compare and set the holder of a conversation's line (docs/semantics.md: one live turn per
-- conversation): the turn of it that may run, resume or wait now.
--
-- KEYS[1] the conversation's line
-- ARGV[1] the holder the caller expects ('' = none), ARGV[2] the new holder ('' = none),
-- ARGV[3] seconds the line is kept once set (a conversation's keys outlive no turn of it)
-- Returns 1 when set, 0 when the line's holder is another.
local holder = redis.call('GET', KEYS[1]) or ''
if holder ~= ARGV[1] then
  return 0
end
if ARGV[2] == '' then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3])
end
return 1
