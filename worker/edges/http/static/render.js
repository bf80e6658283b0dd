// Rendering a turn: its question (with Edit and its inline editor), its timeline (text segments,
// tool cards, "Resuming…" markers, approval cards, in ledger order), the answer's text, and its
// status bar with Stop / Continue / Regenerate. It draws what a Turn (turn.js) holds and decides
// nothing: whether a fork is offered is the conversation's word (turn.canFork).
import { approvalNode, drawApproval } from "./approvals.js";
import { el, short } from "./dom.js";
import { editorForm, openEditor } from "./editor.js";
import { answerText } from "./turnstate.js";

// what a person reads beside the status word (the word itself is docs/http-api.md's)
const LABELS = {
  queued: "Waiting for a worker…",
  running: "Working…",
  resuming: "Resuming…",
  waiting: "Waiting for approval",
  completed: "Done",
  stopped: "Stopped",
};

const CALL_STATES = {
  running: () => "running",
  completed: () => "completed",
  error: () => "error",
  interrupted: () => "interrupted — outcome unknown",
  blocked: (item) => (item.inheritedFrom ? "blocked — done before the fork, not run again" : "blocked — exact repeat, not run"),
  refused: (item) => (item.reason === "denied" ? "refused — denied by a person" : "refused — retry not run"),
};

export class TurnView {
  constructor(turn, { onInspect }) {
    this.turn = turn;
    this.nodes = new Map(); // timeline item key -> {node, drawn}
    // the turn's streamed text, whole (docs/http-api.md `answer`): the timeline shows it in its
    // segments, this holds it joined for whoever reads the answer at once
    this.answer = el("div", { class: "answer-text", "data-testid": "answer", hidden: true });
    this.timeline = el("div", { class: "timeline", "data-testid": "timeline" });
    this.statusWord = el("span", { "data-testid": "turn-status", class: "status-word" }, "queued");
    this.statusLabel = el("span", { class: "status-label" });
    this.autoCount = el("span", { class: "auto-count", "data-testid": "auto-continues" });
    this.actions = el("span", { class: "turn-actions" });
    this.question = el("p", { class: "user-message" });
    this.questionActions = el("div", { class: "question-actions" });
    this.editor = null; // the inline editor's form while the person edits the message
    this.questionBox = el("div", { class: "question" }, this.question, this.questionActions);
    this.replacedNote = el("span", { class: "replaced-note", hidden: true });
    this.inspectButton = el("button", { type: "button", class: "link-button", text: "Inspect", onclick: onInspect });
    this.node = el(
      "article",
      { class: "turn", "data-turn-id": turn.id, "aria-label": "Turn" },
      this.questionBox,
      el(
        "div",
        { class: "assistant" },
        this.timeline,
        this.answer,
        el(
          "footer",
          { class: "turn-bar" },
          el("span", { class: "status", role: "status" }, this.statusWord, this.statusLabel),
          this.replacedNote,
          this.autoCount,
          this.actions,
          this.inspectButton,
        ),
      ),
    );
  }

  update() {
    const { turn } = this;
    const { state } = turn;
    if (state.message !== null) this.question.textContent = state.message;
    else if (turn.message) this.question.textContent = turn.message;
    this.drawQuestion();
    this.drawTimeline(state);
    const text = answerText(state);
    if (this.answer.textContent !== text) this.answer.textContent = text;
    this.drawStatus();
  }

  // The message's Edit, or its inline editor while the person edits it; a replaced turn is
  // marked (a later fork took its place: docs/page.md) and offers neither.
  drawQuestion() {
    const { turn } = this;
    if (turn.replacedBy) {
      this.node.dataset.replacedBy = turn.replacedBy;
      this.replacedNote.textContent = "Replaced by a later answer";
      this.replacedNote.hidden = false;
    }
    if (turn.editor && !this.editor) {
      this.editor = editorForm(turn);
      this.questionBox.append(this.editor);
    } else if (!turn.editor && this.editor) {
      this.editor.remove();
      this.editor = null;
    }
    this.question.hidden = Boolean(this.editor);
    if (this.editor) this.editor.querySelector('[data-testid="edit-confirm"]').disabled = !turn.canFork("edit");
    const offer = !this.editor && turn.canFork("edit");
    const shown = this.questionActions.childElementCount > 0;
    if (offer === shown) return; // the same button: keep it (and the focus on it)
    this.questionActions.replaceChildren(...(offer ? [el("button", {
      type: "button", class: "link-button", "data-testid": "edit", text: "Edit", onclick: () => openEditor(turn),
    })] : []));
  }

  // The timeline's nodes follow its items: one node per item, in the items' order; an item a
  // clear removed takes its node away.
  drawTimeline(state) {
    const keys = new Set();
    let previous = null;
    for (const item of state.timeline) {
      keys.add(item.key);
      let entry = this.nodes.get(item.key);
      if (!entry) {
        entry = { node: this.create(item), drawn: null };
        this.nodes.set(item.key, entry);
      }
      this.draw(entry, item);
      const expected = previous ? previous.nextSibling : this.timeline.firstChild;
      if (expected !== entry.node) {
        if (previous) previous.after(entry.node);
        else this.timeline.prepend(entry.node);
      }
      previous = entry.node;
    }
    for (const [key, entry] of this.nodes) {
      if (!keys.has(key)) {
        entry.node.remove();
        this.nodes.delete(key);
      }
    }
  }

  create(item) {
    if (item.kind === "text") return el("p", { class: "segment", "data-kind": "text" });
    if (item.kind === "marker") return el("p", { class: "marker", "data-kind": "marker", "data-cause": item.cause });
    if (item.kind === "approval") return approvalNode(this.turn, item.approvalId);
    return el("div", { class: "tool-card", "data-kind": "tool", "data-testid": "tool-call", "data-call-id": item.callId });
  }

  draw(entry, item) {
    if (item.kind === "approval") return drawApproval(this.turn, item.approvalId);
    const signature = item.kind === "tool" ? JSON.stringify([item.state, item.result, item.matched, item.reason]) : item.text;
    if (entry.drawn === signature) return;
    entry.drawn = signature;
    if (item.kind === "tool") drawCard(entry.node, item);
    else entry.node.textContent = item.text;
  }

  drawStatus() {
    const { turn } = this;
    const status = turn.status;
    this.statusWord.textContent = status;
    this.node.dataset.status = status;
    const code = turn.code;
    const why = code ? `: ${code.replaceAll("_", " ")}` : "";
    let label = LABELS[status] || status;
    if (status === "queued" && turn.state.runs.length) label = LABELS.resuming; // continued: a new run waits
    if (status === "stopped") label = `Stopped${why}${turn.canContinue ? " — Continue is available" : ""}`;
    if (turn.autoTimer) label = `Stopped${why} — continuing on its own in a moment (Stop cancels)`;
    this.statusLabel.textContent = label;
    this.autoCount.textContent = turn.autoContinues ? `auto-continued ${turn.autoContinues} of ${turn.maxAuto}` : "";
    const buttons = [];
    if (!turn.ended || turn.autoTimer) {
      buttons.push(el("button", { type: "button", "data-testid": "stop", text: "Stop", onclick: () => turn.stop() }));
    }
    if (status === "stopped" && turn.canContinue && !turn.autoTimer) {
      buttons.push(el("button", {
        type: "button", class: "primary", "data-testid": "continue", text: "Continue",
        onclick: () => turn.continueTurn(),
      }));
    }
    if (turn.canFork("regenerate") && !turn.autoTimer) {
      buttons.push(el("button", {
        type: "button", "data-testid": "regenerate", text: "Regenerate", onclick: () => turn.regenerate(),
      }));
    }
    const wanted = buttons.map((b) => b.dataset.testid).join(" ");
    const shown = [...this.actions.children].map((b) => b.dataset.testid).join(" ");
    if (wanted === shown) return; // the same buttons: keep them (and the focus on them)
    const focused = this.actions.contains(document.activeElement) ? document.activeElement.dataset.testid : null;
    this.actions.replaceChildren(...buttons);
    if (focused) {
      const again = this.actions.querySelector(`[data-testid="${focused}"]`);
      (again || this.inspectButton).focus();
    }
  }
}

function drawCard(node, item) {
  const state = item.state;
  node.dataset.state = state;
  const parts = [
    el("div", { class: "card-head" },
      el("span", { class: "tool-name", text: item.tool }),
      el("span", { class: `badge badge-${state}`, text: CALL_STATES[state](item) })),
    el("div", { class: "card-row" }, el("span", { class: "k", text: "input" }),
      el("code", { text: short(item.input) })),
  ];
  if (item.result !== undefined) {
    parts.push(el("div", { class: "card-row" }, el("span", { class: "k", text: "result" }),
      el("code", { text: short(item.result) })));
  }
  if (item.matched) {
    const m = item.matched;
    // an exact repeat (`completed`) matched the same call, wherever it was recorded
    const same = item.reason === "completed" || (m.tool === item.tool && JSON.stringify(m.input) === JSON.stringify(item.input));
    const where = item.inheritedFrom ? `by the replaced turn ${item.inheritedFrom}` : "earlier";
    const other = m.tool ? `${m.tool} ${short(m.input, 80)}` : item.inheritedFrom ? `a call of the replaced turn ${item.inheritedFrom}` : "";
    const what = same ? `the same call, completed ${where}` : other;
    parts.push(el("div", { class: "card-row matched" }, el("span", { class: "k", text: "matched" }),
      el("code", { text: `${what} (${m.call_id || "?"})` })));
  }
  node.replaceChildren(...parts);
}
