-- Tenant admission (docs/semantics.md, tenants): which turns may start now, in fair order.
--
-- Every key is in the one slot {tenants} (ledger.keys): the ring of tenants with waiting turns,
-- and per tenant its queued turns (new), its resuming turns (after a wait), the turns holding
-- its slots and the theoretical arrival time of its next start (its rate, evenly spaced).
-- A turn holds a slot from its admission until it ends, stops or waits (``leave``); the slot is
-- the turn's, not its run's, so a takeover keeps it and it is given back once.
--
-- KEYS[1] the ring (zset tenant -> order), KEYS[2] the owners (hash turn -> tenant),
-- KEYS[3] the counter of the ring's order (and, beside it, the set of tenants holding slots,
-- its name with ':holding' for ':order'); KEYS[4..] the broker's chunk queues, when the broker
-- is this server (then the room is read here: see ARGV[5])
-- ARGV[1] op: start | wait | leave | pump | drop
-- ARGV[2] now (ms), ARGV[3] concurrency (0: none), ARGV[4] ms between two starts (0: none),
-- ARGV[5] new turns that may be let through now (the room ahead of the workers); negative, -N:
--   N less the messages waiting in KEYS[4..],
-- ARGV[6] most turns let through by this call, ARGV[7] the key prefix of a tenant
-- start: ARGV[8] tenant, ARGV[9] turn. Takes a slot for a new turn if nothing waits anywhere,
--   the room, its tenant's slots and rate allow; 1 taken, 0 not (nothing changed).
-- wait: ARGV[8] tenant, ARGV[9] turn, ARGV[10] new | resume. The turn waits for its tenant
--   (unless it holds a slot already: then it is let through again), then pump.
-- leave: ARGV[8] turn. The turn gives back its slot (or its place in a queue), then pump.
-- drop: ARGV[8] tenant, ARGV[9] turn, ARGV[10] its slot's score. A slot whose turn is gone,
--   given back if it is still the one read.
-- Returns (start, drop: a number) the turns let through, flat: turn, tenant, kind, waited ms;
-- then the earliest time (ms) a tenant held back by its rate may start (0: none), and last
-- 1 when this call put the turn in its tenant's queue (wait), else 0.
local ring, owners, order = KEYS[1], KEYS[2], KEYS[3]
local holding = string.gsub(order, ':order$', ':holding')
local op = ARGV[1]
local now = tonumber(ARGV[2])
local concurrency = tonumber(ARGV[3])
local interval = tonumber(ARGV[4])
local room = tonumber(ARGV[5])
if room < 0 then
  room = -room
  for i = 4, #KEYS do
    room = room - redis.call('LLEN', KEYS[i])
  end
end
local most = tonumber(ARGV[6])
local prefix = ARGV[7]

local function key(tenant, part)
  return prefix .. tenant .. ':' .. part
end

local function free(tenant)
  return concurrency == 0 or redis.call('ZCARD', key(tenant, 'running')) < concurrency
end

local function next_start(tenant)
  if interval == 0 then
    return 0
  end
  return tonumber(redis.call('GET', key(tenant, 'tat')) or '0')
end

local function started(tenant)
  if interval > 0 then
    local tat = math.max(next_start(tenant), now) + interval
    redis.call('SET', key(tenant, 'tat'), string.format('%.0f', tat), 'PX', interval + 60000)
  end
end

local function hold(tenant, turn)
  redis.call('ZADD', key(tenant, 'running'), now, turn)
  redis.call('HSET', owners, turn, tenant)
  redis.call('SADD', holding, tenant)
end

local function unhold(tenant, turn)
  redis.call('ZREM', key(tenant, 'running'), turn)
  if redis.call('ZCARD', key(tenant, 'running')) == 0 then
    redis.call('SREM', holding, tenant)
  end
end

if op == 'start' then
  local tenant, turn = ARGV[8], ARGV[9]
  if room <= 0 or redis.call('EXISTS', ring) == 1 or not free(tenant) then
    return 0
  end
  if next_start(tenant) > now then
    return 0
  end
  hold(tenant, turn)
  started(tenant)
  return 1
end

if op == 'drop' then
  local tenant, turn = ARGV[8], ARGV[9]
  local score = redis.call('ZSCORE', key(tenant, 'running'), turn)
  if score and tonumber(score) == tonumber(ARGV[10]) then
    unhold(tenant, turn)
    if redis.call('HGET', owners, turn) == tenant then
      redis.call('HDEL', owners, turn)
    end
    return 1
  end
  return 0
end

local out = {}
local added = 0

if op == 'wait' then
  local tenant, turn, kind = ARGV[8], ARGV[9], ARGV[10]
  if redis.call('ZSCORE', key(tenant, 'running'), turn) then
    -- let through already (a crash before its release, or a second call): again
    out[#out + 1] = turn
    out[#out + 1] = tenant
    out[#out + 1] = kind
    out[#out + 1] = 0
    most = most - 1
  else
    local queue = key(tenant, kind == 'resume' and 'resume' or 'queued')
    added = redis.call('ZADD', queue, 'NX', now, turn)
    redis.call('HSET', owners, turn, tenant)
    if redis.call('ZSCORE', ring, tenant) == false then
      redis.call('ZADD', ring, redis.call('INCR', order), tenant)
    end
  end
elseif op == 'leave' then
  local turn = ARGV[8]
  local tenant = redis.call('HGET', owners, turn)
  if tenant then
    unhold(tenant, turn)
    redis.call('ZREM', key(tenant, 'queued'), turn)
    redis.call('ZREM', key(tenant, 'resume'), turn)
    redis.call('HDEL', owners, turn)
  end
end

-- pump: tenants in ring order, one turn each per round (resumes first, then new turns while
-- there is room); a tenant served goes to the back of the ring, one with nothing left leaves it
local wake = 0
local moved = true
while moved and most > 0 do
  moved = false
  local tenants = redis.call('ZRANGE', ring, 0, 255)
  for _, tenant in ipairs(tenants) do
    if most <= 0 then
      break
    end
    local kind, queue = nil, nil
    if free(tenant) then
      if redis.call('ZCARD', key(tenant, 'resume')) > 0 then
        kind, queue = 'resume', key(tenant, 'resume')
      elseif room > 0 and redis.call('ZCARD', key(tenant, 'queued')) > 0 then
        local at = next_start(tenant)
        if at <= now then
          kind, queue = 'new', key(tenant, 'queued')
        elseif wake == 0 or at < wake then
          wake = at
        end
      end
    end
    if kind then
      local head = redis.call('ZRANGE', queue, 0, 0, 'WITHSCORES')
      redis.call('ZREM', queue, head[1])
      hold(tenant, head[1])
      if kind == 'new' then
        started(tenant)
        room = room - 1
      end
      out[#out + 1] = head[1]
      out[#out + 1] = tenant
      out[#out + 1] = kind
      out[#out + 1] = now - tonumber(head[2])
      most = most - 1
      moved = true
      redis.call('ZADD', ring, redis.call('INCR', order), tenant)
    end
    if redis.call('ZCARD', key(tenant, 'queued')) == 0
      and redis.call('ZCARD', key(tenant, 'resume')) == 0 then
      redis.call('ZREM', ring, tenant)
    end
  end
end
out[#out + 1] = wake
out[#out + 1] = added
return out
