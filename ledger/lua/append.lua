-- Fenced append of a batch of a run's events, in one atomic step (a lone event takes a plain
-- XADD, fenced by its explicit id). Changes of a turn's metadata are transitions
-- (transition.lua), never appends.
--
-- KEYS[1] stream, KEYS[2] meta hash, KEYS[3] (optional) the turn's Stop flag: given, a set flag
-- refuses the batch (a write's tool_start starts nothing once Stop was asked)
-- ARGV[1] lease epoch the caller holds
-- ARGV[2] number of events n, then n pairs (stream id, payload), then (optional) the number m of
-- the batch's events that spent tokens (a model_done with usage), then m triples (its place k in
-- the batch, input tokens, output tokens): each one this call adds is added to the turn's totals
-- in the meta hash (input_tokens, output_tokens), in the same atomic step, so the totals are the
-- stream's sum; a turn recorded without totals (before they were kept) gets none
-- An id already in the stream holding this very payload is ours (a retry of this call, or an
-- append that landed unseen) and is not added again. An id taken by anything else, or an id at
-- or below the top that is free, means the caller's sequence lags: nothing is written and
-- BEHIND <top id> tells it where to go on. The batch is checked whole before any XADD.
-- Errors: NOTURN, FENCED <current epoch>, BEHIND <top id>, STOPPED <the flag's value>.
local current = redis.call('HGET', KEYS[2], 'epoch')
if not current then
  return redis.error_reply('NOTURN')
end
if current ~= ARGV[1] then
  return redis.error_reply('FENCED ' .. current)
end
local function parse(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end
local top = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
local top_ms, top_seq = -1, -1
if top[1] then
  top_ms, top_seq = parse(top[1][1])
end
local n = tonumber(ARGV[2])
local first_new = n + 1
for k = 1, n do
  local id = ARGV[1 + 2 * k]
  local ms, seq = parse(id)
  if ms > top_ms or (ms == top_ms and seq > top_seq) then
    first_new = k
    break
  end
  local at = redis.call('XRANGE', KEYS[1], id, id)
  if #at == 0 or at[1][2][2] ~= ARGV[2 + 2 * k] then
    return redis.error_reply('BEHIND ' .. top_ms .. '-' .. top_seq)
  end
end
-- a batch that landed whole before (a retry) is ours whatever the flag says now
if KEYS[3] and first_new <= n then
  local stop = redis.call('GET', KEYS[3])
  if stop then
    return redis.error_reply('STOPPED ' .. stop)
  end
end
for k = first_new, n do
  redis.call('XADD', KEYS[1], ARGV[1 + 2 * k], 'e', ARGV[2 + 2 * k])
end
local spent = 3 + 2 * n
local m = tonumber(ARGV[spent] or '0')
if m > 0 and redis.call('HEXISTS', KEYS[2], 'input_tokens') == 1 then
  for j = 1, m do
    local at = spent + 3 * (j - 1)
    if tonumber(ARGV[at + 1]) >= first_new then
      redis.call('HINCRBY', KEYS[2], 'input_tokens', ARGV[at + 2])
      redis.call('HINCRBY', KEYS[2], 'output_tokens', ARGV[at + 3])
    end
  end
end
return n
