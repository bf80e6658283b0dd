// The page's turn state (worker/edges/http/static/turnstate.js): a pure fold of ledger events.
// Run with `node --test tests/js`; tests/unit/test_page_js.py runs it under pytest.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";

const source = await readFile(new URL("../../worker/edges/http/static/turnstate.js", import.meta.url), "utf8");
const { initial, fold, replay, answerText, after } = await import(
  `data:text/javascript;charset=utf-8,${encodeURIComponent(source)}`
);

let clock = 0;
function ev(type, fields = {}) {
  clock += 1;
  return { type, event_id: `e${clock}`, turn_id: "t", run_id: fields.run_id || "r1", chunk: 0, ts: clock, ...fields };
}
// [id, event] pairs with stream ids 0-1, 0-2, …
function stream(...events) {
  return events.map((e, i) => [`0-${i + 1}`, e]);
}
const kinds = (state) => state.timeline.map((i) => i.kind);

test("text, tool, text, tool, text folds into a timeline in ledger order", () => {
  const state = replay(stream(
    ev("turn_started", { message: "hi" }),
    ev("run_started", { cause: "first", epoch: 1 }),
    ev("model_start", { step: 0 }),
    ev("text", { text: "One. " }),
    ev("tool_start", { call_id: "c1", tool: "list_outbox", input: {} }),
    ev("tool_done", { call_id: "c1", tool: "list_outbox", result: [] }),
    ev("model_start", { step: 1 }),
    ev("text", { text: "Two" }),
    ev("text", { text: ". " }),
    ev("tool_start", { call_id: "c2", tool: "list_outbox", input: {} }),
    ev("tool_done", { call_id: "c2", tool: "list_outbox", result: [] }),
    ev("model_start", { step: 2 }),
    ev("text", { text: "Three." }),
    ev("run_ended", { reason: "completed" }),
    ev("turn_ended", { status: "completed", code: "", can_continue: false }),
  ));
  assert.deepEqual(kinds(state), ["text", "tool", "text", "tool", "text"]);
  assert.deepEqual(state.timeline.filter((i) => i.kind === "text").map((i) => i.text), ["One. ", "Two. ", "Three."]);
  assert.equal(answerText(state), "One. Two. Three.");
  assert.deepEqual(state.timeline.filter((i) => i.kind === "tool").map((i) => i.state), ["completed", "completed"]);
  assert.equal(state.status, "completed");
  assert.equal(state.endSeen, true);
  assert.equal(state.message, "hi");
});

test("a repeated or older stream id changes nothing", () => {
  const events = stream(ev("run_started", { cause: "first" }), ev("model_start"), ev("text", { text: "A" }));
  const once = replay(events);
  const twice = replay(events, once);
  assert.equal(twice, once);
  assert.equal(answerText(twice), "A");
  assert.ok(after("10-0", "9-5") && after("1-2", "1-1") && !after("1-1", "1-1"));
});

test("fold never changes the state it is given", () => {
  const before = replay(stream(ev("run_started", { cause: "first" }), ev("model_start"), ev("text", { text: "A" })));
  const snapshot = JSON.stringify(before);
  fold(before, "0-9", ev("text", { text: "B" }));
  fold(before, "0-10", ev("clear"));
  assert.equal(JSON.stringify(before), snapshot);
});

test("a clear removes the text streamed since its model call, a resume shows no segment twice", () => {
  const state = replay(stream(
    ev("run_started", { cause: "first" }),
    ev("model_start", { step: 0 }),
    ev("text", { text: "Kept. " }),
    ev("tool_start", { call_id: "c1", tool: "list_outbox", input: {} }),
    ev("tool_done", { call_id: "c1", tool: "list_outbox", result: [] }),
    ev("model_start", { step: 1 }),
    ev("text", { text: "Half a sen" }),
    ev("run_ended", { reason: "soft_limit" }),
    ev("run_started", { cause: "next_chunk", run_id: "r2" }),
    ev("clear", { run_id: "r2", reason: "resume" }),
    ev("model_start", { step: 1, run_id: "r2" }),
    ev("text", { text: "Half a sentence, whole.", run_id: "r2" }),
  ));
  assert.deepEqual(kinds(state), ["text", "tool", "marker", "text"]);
  assert.equal(answerText(state), "Kept. Half a sentence, whole.");
  assert.match(state.timeline[2].text, /^Resuming… \(next chunk\)/);
  assert.equal(state.status, "running");
});

test("status comes from the events: resuming after a soft limit, waiting, stopped with its code", () => {
  let state = replay(stream(ev("run_started", { cause: "first" }), ev("run_ended", { reason: "soft_limit" })));
  assert.equal(state.status, "resuming");
  state = replay(stream(ev("run_started", { cause: "first" }), ev("run_ended", { reason: "waiting" })));
  assert.equal(state.status, "waiting");
  state = replay(stream(
    ev("run_started", { cause: "first" }),
    ev("tool_start", { call_id: "c1", tool: "send_email", input: {} }),
    ev("run_ended", { reason: "crashed" }),
    ev("turn_ended", { status: "stopped", code: "crashed", can_continue: true }),
  ));
  assert.deepEqual([state.status, state.code, state.canContinue], ["stopped", "crashed", true]);
  assert.equal(state.timeline[0].state, "interrupted");
  assert.equal(initial().status, "queued");
});

test("blocked and refused calls are cards of their own; approvals take their place in the timeline", () => {
  const state = replay(stream(
    ev("run_started", { cause: "first" }),
    ev("tool_start", { call_id: "c1", tool: "send_email", input: { to: "a" } }),
    ev("tool_done", { call_id: "c1", tool: "send_email", result: { ok: true } }),
    ev("tool_blocked", { call_id: "c2", tool: "send_email", input: { to: "a" }, reason: "completed", matched_call_id: "c1", result: "done" }),
    ev("approval_requested", { approval_id: "a1", call_id: "c3", tool: "send_email", input: { to: "b" }, signature: "s" }),
    ev("run_ended", { reason: "waiting" }),
    ev("approval_decided", { approval_id: "a1", call_id: "c3", decision: "deny", reason: "no", by: "page" }),
    ev("run_started", { cause: "approval", run_id: "r2" }),
    ev("tool_blocked", { call_id: "c3", tool: "send_email", input: { to: "b" }, reason: "denied", result: "denied" }),
  ));
  assert.deepEqual(kinds(state), ["tool", "tool", "approval", "marker", "tool"]);
  assert.deepEqual(state.timeline.filter((i) => i.kind === "tool").map((i) => i.state), ["completed", "blocked", "refused"]);
  assert.equal(state.timeline[1].matched.call_id, "c1");
  assert.equal(state.timeline[4].matched, null);
  assert.equal(state.approvals.a1.decided.decision, "deny");
});

test("a fork's repeat of a replaced turn's write is a blocked card answered from that turn's record", () => {
  const state = replay(stream(
    ev("turn_started", { message: "Email a", fork_of: "t0", inherits: ["t0"], replaces: ["t0"] }),
    ev("run_started", { cause: "first" }),
    ev("inherited", { turns: ["t0"], note: "Tool calls already recorded: send_email" }),
    ev("model_start", { step: 0 }),
    ev("tool_blocked", {
      call_id: "c9", tool: "send_email", input: { to: "a" }, reason: "completed",
      matched_call_id: "c1", inherited_from: "t0", result: { sent: true },
    }),
    ev("tool_blocked", { call_id: "c10", tool: "send_email", input: { to: "a" }, reason: "completed", matched_call_id: "c9" }),
  ));
  assert.equal(state.forkOf, "t0");
  assert.deepEqual(state.inherited, { turns: ["t0"], note: "Tool calls already recorded: send_email" });
  const [inherited, own] = state.timeline.filter((i) => i.kind === "tool");
  assert.equal(inherited.state, "blocked");
  assert.equal(inherited.inheritedFrom, "t0");
  assert.deepEqual(inherited.matched, { call_id: "c1" }); // the call is in the replaced turn, not this one
  assert.deepEqual(inherited.result, { sent: true });
  assert.equal(own.inheritedFrom, null);
  assert.equal(initial().forkOf, null);
  assert.equal(initial().inherited, null);
});
