// A turn's state: a pure fold of its ledger events (docs/events.md, docs/http-api.md), no DOM, no network.
// `fold(state, id, event)` returns the state after one event; `replay(entries)` folds a list.
// The timeline holds the turn's items in ledger order, exactly as the events came: text
// segments (one per model call's streamed text), tool cards, "Resuming…" markers and approval
// requests. A `clear` removes the text it clears, so a resume never shows a segment twice.
// This module imports nothing: node's test runner loads it as it is (tests/js).

// why a run started, as a person reads it
export const CAUSES = {
  first: "first run",
  next_chunk: "next chunk",
  redelivery: "redelivered",
  reaper: "picked up after a dead run",
  transport_error: "after a transport error",
  auto_continue: "continued automatically",
  continue: "continued",
  approval: "after a person's decision",
};

export const ENDED = new Set(["completed", "stopped"]);

// what a tool_blocked's reason makes of its call
const BLOCKED_STATE = { completed: "blocked", reconciled: "completed" };

export function initial() {
  return {
    lastId: "0-0",
    message: null,
    status: "queued",
    code: "",
    canContinue: false,
    endSeen: false, // the last event read is a turn_ended: the stream is read out
    events: [], // [{id, event}] as they came
    runs: [], // {run_id, chunk, epoch, cause, start, end, reason, detail, note}
    timeline: [], // {kind: "text"|"tool"|"marker"|"approval", key, ...}
    seq: 0, // keys of new items
    segment: null, // the key of the text segment the current model call streams into
    cleared: [], // keys of the text segments a clear would remove (since the last model_start)
    approvals: {}, // approval_id -> {request, decided}
    forkOf: null, // a fork's: the turn it was forked at
    inherited: null, // a fork's: {turns, note}, the replaced turns' record its model was told of
  };
}

function streamPos(id) {
  const [ms, seq] = String(id).split("-").map(Number);
  return [ms || 0, seq || 0];
}

// a stream id strictly after another one
export function after(a, b) {
  const [am, as] = streamPos(a);
  const [bm, bs] = streamPos(b);
  return am > bm || (am === bm && as > bs);
}

// The answer's text: the timeline's text segments joined as written.
export function answerText(state) {
  return state.timeline.filter((i) => i.kind === "text").map((i) => i.text).join("");
}

export function calls(state) {
  return state.timeline.filter((i) => i.kind === "tool");
}

export function pendingApprovals(state) {
  return Object.values(state.approvals).filter((a) => !a.decided);
}

function copy(state) {
  return {
    ...state,
    events: state.events,
    runs: state.runs.map((r) => ({ ...r })),
    timeline: state.timeline.map((i) => ({ ...i })),
    cleared: [...state.cleared],
    approvals: { ...state.approvals },
  };
}

function push(state, item) {
  state.seq += 1;
  const added = { key: `${item.kind}-${state.seq}`, ...item };
  state.timeline.push(added);
  return added;
}

function callItem(state, event, id, callState) {
  return push(state, {
    kind: "tool",
    callId: event.call_id || null,
    tool: event.tool,
    input: event.input,
    state: callState,
    result: undefined,
    reason: null,
    matched: null,
    inheritedFrom: null,
    streamId: id,
  });
}

const HANDLERS = {
  turn_started(state, event) {
    state.message = event.message;
    state.forkOf = event.fork_of || null;
  },

  // a fork's first run, before its first model call: whose journal it answers from
  inherited(state, event) {
    state.inherited = { turns: event.turns || [], note: event.note || null };
  },

  run_started(state, event) {
    state.runs.push({
      run_id: event.run_id,
      chunk: event.chunk,
      epoch: event.epoch,
      cause: event.cause,
      start: event.ts,
      end: null,
      reason: null,
      detail: null,
      note: null,
    });
    state.status = "running";
    state.code = "";
    state.canContinue = false;
    state.segment = null;
    if (event.cause && event.cause !== "first") {
      push(state, { kind: "marker", cause: event.cause, text: `Resuming… (${CAUSES[event.cause] || event.cause})` });
    }
  },

  resumed(state, event) {
    const run = state.runs.find((r) => r.run_id === event.run_id);
    if (run) run.note = event.note;
  },

  // each model call's text is its own segment
  model_start(state) {
    state.segment = null;
    state.cleared = [];
  },

  text(state, event) {
    if (!event.text) return;
    let segment = state.timeline.find((i) => i.key === state.segment);
    if (!segment) {
      segment = push(state, { kind: "text", text: "" });
      state.segment = segment.key;
      state.cleared.push(segment.key);
    }
    segment.text += event.text;
  },

  // the text streamed since the model call began is dropped, wherever it stood
  clear(state) {
    const gone = new Set(state.cleared);
    state.timeline = state.timeline.filter((i) => !gone.has(i.key));
    state.cleared = [];
    state.segment = null;
  },

  tool_start(state, event, id) {
    state.segment = null; // text after a call is a new segment, after its card
    callItem(state, event, id, "running");
  },

  tool_done(state, event) {
    const open = state.timeline.find(
      (i) => i.kind === "tool" && i.state === "running" &&
        (event.call_id && i.callId ? i.callId === event.call_id : i.tool === event.tool),
    );
    if (!open) return;
    open.result = event.result;
    open.state = event.is_error ? "error" : "completed";
  },

  tool_blocked(state, event, id) {
    state.segment = null;
    const matched = event.matched_call_id
      ? state.timeline.find((i) => i.kind === "tool" && i.callId === event.matched_call_id)
      : null;
    const item = callItem(state, event, id, BLOCKED_STATE[event.reason] || "refused");
    item.result = event.result;
    item.reason = event.reason;
    item.inheritedFrom = event.inherited_from || null; // a fork answered from a replaced turn's record
    // a denied call matched nothing: a person refused it
    if (event.reason !== "denied") {
      item.matched = matched
        ? { call_id: matched.callId, tool: matched.tool, input: matched.input }
        : { call_id: event.matched_call_id || null };
    }
  },

  approval_requested(state, event) {
    state.segment = null;
    if (state.approvals[event.approval_id]) return;
    state.approvals[event.approval_id] = { request: event, decided: null };
    push(state, { kind: "approval", approvalId: event.approval_id });
  },

  approval_decided(state, event) {
    const approval = state.approvals[event.approval_id];
    if (!approval || approval.decided) return;
    state.approvals[event.approval_id] = { ...approval, decided: event };
  },

  run_ended(state, event) {
    const run = state.runs.find((r) => r.run_id === event.run_id);
    if (run) Object.assign(run, { end: event.ts, reason: event.reason, detail: event.detail });
    if (event.reason !== "completed") {
      for (const item of state.timeline) {
        if (item.kind === "tool" && item.state === "running") item.state = "interrupted";
      }
    }
    if (event.reason === "soft_limit" || event.reason === "transport_error") state.status = "resuming";
    if (event.reason === "waiting") state.status = "waiting"; // no run holds it: a person decides
  },

  turn_ended(state, event) {
    state.status = event.status;
    state.code = event.code || "";
    state.canContinue = Boolean(event.can_continue);
    for (const run of state.runs) if (run.end === null) run.end = event.ts;
  },
};

// The state after one more event. An event whose stream id is not after the last one folded
// is a repeat (a replay after a reconnect) and changes nothing.
export function fold(state, id, event) {
  if (!after(id, state.lastId)) return state;
  const next = copy(state);
  next.lastId = id;
  next.endSeen = event.type === "turn_ended";
  next.events = [...state.events, { id, event }];
  const handler = HANDLERS[event.type];
  if (handler) handler(next, event, id);
  return next;
}

export function replay(entries, state = initial()) {
  return entries.reduce((s, [id, event]) => fold(s, id, event), state);
}
