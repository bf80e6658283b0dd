// The inspector: a turn's runs on a time axis, its journal, the notes given to the model on
// resume, its blocked and refused calls, and its raw events.
import { api, turnPath } from "./api.js";
import { $, el, short, time } from "./dom.js";
import { CAUSES, calls } from "./turnstate.js";

let inspected = null; // the turn the inspector shows

export const inspecting = () => inspected;

export function openInspector(turn) {
  inspected = turn;
  $("inspector").hidden = false;
  document.body.classList.add("inspecting");
  renderInspector();
  loadJournal(turn);
  $("inspector-close").focus();
}

export function closeInspector() {
  const turn = inspected;
  inspected = null;
  $("inspector").hidden = true;
  document.body.classList.remove("inspecting");
  turn?.view.inspectButton.focus();
}

// A turn folded an event: the inspector follows when it shows that turn.
export function inspectorSaw(turn, event) {
  if (inspected !== turn) return;
  renderInspector();
  if (event.type === "tool_done" || event.type === "turn_ended") loadJournal(turn);
}

async function loadJournal(turn) {
  const { ok, data } = await api("GET", turnPath(turn.id, "/journal"));
  if (ok && inspected === turn) {
    turn.journal = data;
    renderInspector();
  }
}

function section(title, ...children) {
  return el("section", { class: "inspector-section" }, el("h3", { text: title }), ...children);
}

function runsTimeline(runs) {
  if (!runs.length) return el("p", { class: "muted", text: "No run has started yet." });
  const first = runs[0].start;
  const now = Date.now() / 1000;
  const last = Math.max(...runs.map((r) => r.end ?? now));
  const span = Math.max(last - first, 0.001);
  return el("ol", { class: "runs" }, ...runs.map((run, i) => {
    const left = ((run.start - first) / span) * 100;
    const width = Math.max((((run.end ?? now) - run.start) / span) * 100, 1.5);
    const ended = run.reason ? `ended ${run.reason.replaceAll("_", " ")}` : "running";
    return el("li", { class: "run", "data-testid": "inspector-run", "data-cause": run.cause },
      el("div", { class: "run-label" },
        el("strong", { text: `Run ${i + 1}` }),
        ` chunk ${run.chunk} · epoch ${run.epoch} · cause ${run.cause} · ${ended}`),
      el("div", { class: "axis", "aria-hidden": "true" },
        el("span", { class: `bar bar-${run.reason || "running"}`, style: `left:${left}%;width:${Math.min(width, 100 - left)}%` })),
      el("div", { class: "muted", text: `${time(run.start)} – ${run.end ? `${time(run.end)} (${(run.end - run.start).toFixed(1)} s)` : "now"}` }));
  }));
}

function journalList(journal) {
  if (!journal) return el("p", { class: "muted", text: "Loading…" });
  const rows = [
    ...journal.completed.map((e) => ["completed", e]),
    ...journal.interrupted.map((e) => ["interrupted", e]),
  ];
  if (!rows.length) return el("p", { class: "muted", text: "No tool call recorded." });
  return el("ul", { class: "plain" }, ...rows.map(([kind, e]) =>
    el("li", {}, el("span", { class: `badge badge-${kind}`, text: kind }), " ",
      el("code", { text: `${e.tool} ${short(e.input, 100)}` }),
      kind === "completed" ? el("div", { class: "muted", text: `→ ${short(e.result, 160)}` }) : null)));
}

// The tokens the turn's model calls spent, as their providers reported them on model_done.
function usageLine(events) {
  let input = 0, output = 0, reported = 0;
  for (const { event } of events) {
    if (event.type !== "model_done" || !event.usage) continue;
    input += event.usage.input_tokens || 0;
    output += event.usage.output_tokens || 0;
    reported += 1;
  }
  const text = reported
    ? `${input.toLocaleString()} in · ${output.toLocaleString()} out, over ${reported} model call(s)`
    : "No model call reported what it spent.";
  return el("p", { "data-testid": "inspector-usage", text });
}

function renderInspector() {
  const turn = inspected;
  if (!turn) return;
  const { state } = turn;
  $("inspector-title").textContent = `Turn ${turn.id.slice(0, 18)}…`;
  const notes = state.runs.filter((r) => r.note);
  const stopped = calls(state).filter((c) => c.state === "blocked" || c.state === "refused");
  // a fork's first run was told what the turns it replaced did (their journal is its own)
  const inherited = state.inherited?.note
    ? el("figure", {},
      el("figcaption", { text: `a fork: the record of the turns it replaced (${state.inherited.turns.join(", ")})` }),
      el("pre", { class: "note", text: state.inherited.note }))
    : null;
  $("inspector-body").replaceChildren(
    section("Runs", runsTimeline(state.runs)),
    section("Tokens", usageLine(state.events)),
    section("Journal", journalList(turn.journal)),
    section("Notes given to the model on resume or fork", notes.length || inherited
      ? el("div", {}, inherited, ...notes.map((r) => el("figure", {},
        el("figcaption", { text: `${CAUSES[r.cause] || r.cause}, chunk ${r.chunk}` }),
        el("pre", { class: "note", text: r.note }))))
      : el("p", { class: "muted", text: "None: no run resumed or forked with a journal to report." })),
    section("Blocked and refused calls", stopped.length
      ? el("ul", { class: "plain" }, ...stopped.map((c) => el("li", {},
        el("span", { class: `badge badge-${c.state}`, text: `${c.state} (${c.reason})` }), " ",
        el("code", { text: `${c.tool} ${short(c.input, 100)}` }),
        c.matched
          ? el("div", { class: "muted", text: `matched ${c.matched.call_id || "?"}${c.matched.tool ? ` — ${c.matched.tool} ${short(c.matched.input, 80)}` : ""}` })
          : el("div", { class: "muted", text: short(c.result, 160) }))))
      : el("p", { class: "muted", text: "None." })),
    section("Raw events", el("div", { class: "raw" }, el("table", {},
      el("thead", {}, el("tr", {}, ...["stream id", "chunk", "type", "detail"].map((h) => el("th", { scope: "col", text: h })))),
      el("tbody", {}, ...state.events.map(({ id, event }) => {
        const { v, event_id, turn_id, run_id, chunk, ts, type, ...rest } = event;
        return el("tr", {}, el("td", { text: id }), el("td", { text: String(chunk) }),
          el("td", { text: type }), el("td", {}, el("code", { text: short(rest, 200) })));
      }))))),
  );
}
