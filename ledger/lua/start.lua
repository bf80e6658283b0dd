-- A write's tool_start, appended only while the turn's Stop flag is unset (docs/semantics.md):
-- one XADD at the run's explicit stream id, fenced by that id as a plain append is (an id of an
-- older epoch is refused by Redis itself), and refused as a whole once Stop was asked or a new
-- message superseded the turn.
--
-- KEYS[1] stream, KEYS[2] the turn's Stop flag
-- ARGV[1] stream id, ARGV[2] payload
-- Returns 1 when appended (or found there already: a retry of an append that landed unseen, the
-- one case the flag does not refuse). Errors: STOPPED <the flag's value>, NOTURN; an id at or
-- below the stream's top fails as a plain XADD does ("equal or smaller"), for the caller to
-- resolve as it resolves a refused XADD.
local stop = redis.call('GET', KEYS[2])
if stop then
  local at = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])
  if #at > 0 and at[1][2][2] == ARGV[2] then
    return 1
  end
  return redis.error_reply('STOPPED ' .. stop)
end
if not redis.call('XADD', KEYS[1], 'NOMKSTREAM', ARGV[1], 'e', ARGV[2]) then
  return redis.error_reply('NOTURN')
end
return 1
