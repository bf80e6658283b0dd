// A turn on the page: its state folded from its ledger events (turnstate.js), followed live
// (stream.js), polled for what the events do not carry (auto-continue count, whether Continue
// is still allowed), continued on its own after a time-limit stop (docs/semantics.md), stopped and
// continued on a click, forked (Regenerate, Edit: the conversation says when, and makes the fork).
// The status word changes from the events only: the poll fills a gap
// the events leave (queued after a Continue, a decided approval) but never shows an end whose
// turn_ended the page has not read, so `completed` never stands beside a partial answer.
import { api, turnPath } from "./api.js";
import { syncApprovals } from "./approvals.js";
import { showError, sleep } from "./dom.js";
import { inspectorSaw } from "./inspector.js";
import { TurnView } from "./render.js";
import { Backoff, GIVE_UP_MS, readEvents } from "./stream.js";
import { ENDED, fold, initial } from "./turnstate.js";

// stops a client may continue on its own (docs/semantics.md): cut off by time or a lost worker
const AUTO_CODES = new Set(["crashed", "handoff_lost", "max_chunks"]);
// ms the page waits before continuing a time-limit stop on its own (Stop cancels it meanwhile)
const AUTO_DELAY_MS = 1500;
// ms between looks at a live turn's status (the events say most; this catches the rest)
const REFRESH_MS = 2000;

export class Turn {
  constructor(id, { conversationId, message, maxAuto, isNewest, autoOn, onInspect, onEnded, forks }) {
    this.id = id;
    this.conversationId = conversationId;
    this.message = message || null;
    this.maxAuto = maxAuto;
    this.isNewest = isNewest; // () => whether this is its conversation's newest turn
    this.autoOn = autoOn; // () => whether the person lets the page continue on its own
    this.onEnded = onEnded;
    // the conversation's word on forks: can(turn, "regenerate"|"edit"), fork(turn, message?) -> ok;
    // changed(turn): this turn's status changed (whether the others offer a fork may too)
    this.forks = forks;
    this.replacedBy = null; // the fork that replaced this turn (docs/semantics.md), or null
    this.editor = null; // the inline editor of its message while open (editor.js)
    this.drawnStatus = null;
    this.state = initial();
    this.gap = null; // {status, atId}: a status the events have not said yet, valid until the next one
    this.polled = null; // {can_continue, atId}: the poll's word on Continue
    this.autoContinues = 0;
    this.approvalUi = new Map();
    this.following = false;
    this.autoTimer = null;
    this.userStopped = false;
    this.backoff = new Backoff();
    this.notice = ""; // the "reconnecting" line this turn shows, cleared once reached
    this.gaveUp = false;
    this.view = new TurnView(this, { onInspect: () => onInspect(this) });
    this.update();
  }

  // Redraw the turn; a status that changed is told to the conversation.
  update() {
    this.view.update();
    if (this.status === this.drawnStatus) return;
    this.drawnStatus = this.status;
    this.forks?.changed(this);
  }

  canFork(kind) {
    return Boolean(this.forks?.can(this, kind));
  }

  // Regenerate: a fork at this turn with its own message (POST /v1/turns/{id}/fork, empty body).
  regenerate() {
    return this.forks.fork(this);
  }

  // Edit: a fork at this turn with the person's new message.
  edit(message) {
    return this.forks.fork(this, message);
  }

  // A fork replaced this turn: it is no longer the conversation's answer, nor is it forked again.
  replaced(by) {
    this.replacedBy = by;
    this.editor = null;
    this.update();
  }

  get node() {
    return this.view.node;
  }

  get status() {
    const { gap, state } = this;
    return gap && gap.atId === state.lastId ? gap.status : state.status;
  }

  get ended() {
    return ENDED.has(this.status);
  }

  get code() {
    return this.status === "stopped" ? this.state.code : "";
  }

  get canContinue() {
    const { polled, state } = this;
    return polled && polled.atId === state.lastId ? polled.can_continue : state.canContinue;
  }

  apply(id, event) {
    const before = this.state;
    this.state = fold(before, id, event);
    if (this.state === before) return;
    this.update();
    inspectorSaw(this, event);
    if (event.type === "approval_decided") this.refreshSoon(); // waiting, or resuming
    if (event.type === "turn_ended") {
      this.refreshSoon();
      this.onEnded?.(this);
    }
  }

  // A gap the events leave: only a status short of an end, and only until the next event.
  fill(status) {
    if (ENDED.has(status) || status === this.state.status) return;
    if (!ENDED.has(this.state.status) && this.state.status !== "waiting") return;
    this.gap = { status, atId: this.state.lastId };
  }

  async refresh() {
    const atId = this.state.lastId;
    const { ok, data } = await api("GET", turnPath(this.id));
    if (!ok) return;
    this.autoContinues = data.auto_continues;
    this.conversationId = data.conversation_id;
    // an answer older than the events read since it was asked for says nothing about them
    if (atId === this.state.lastId) {
      this.polled = { can_continue: data.can_continue, atId };
      this.fill(data.status);
    }
    syncApprovals(this, data.approvals || []);
    this.update();
    if (!this.ended && !this.following && !this.gaveUp) this.follow(); // continued elsewhere
    this.considerAuto();
  }

  refreshSoon() {
    clearTimeout(this.refreshTimer);
    this.refreshTimer = setTimeout(() => this.refresh(), 50);
  }

  // A time-limit stop of the conversation's newest turn continues on its own (docs/semantics.md), at most
  // maxAuto times; Stop pressed meanwhile cancels it.
  considerAuto() {
    const wanted =
      this.status === "stopped" && AUTO_CODES.has(this.code) && this.canContinue &&
      this.autoContinues < this.maxAuto && this.autoOn() && !this.userStopped && this.isNewest(this);
    if (!wanted || this.autoTimer) return;
    this.autoTimer = setTimeout(async () => {
      this.autoTimer = null;
      if (this.userStopped) return this.update();
      const { ok } = await api("POST", turnPath(this.id, "/continue"), { auto: true });
      if (ok) this.continued();
      await this.refresh();
    }, AUTO_DELAY_MS);
    this.update();
  }

  continued() {
    this.gap = { status: "queued", atId: this.state.lastId };
    this.polled = null;
    this.update();
    this.follow();
  }

  async stop() {
    this.userStopped = true;
    if (this.autoTimer) {
      clearTimeout(this.autoTimer);
      this.autoTimer = null;
      this.update();
      return;
    }
    const { ok, data } = await api("POST", turnPath(this.id, "/stop"));
    if (!ok) showError(`Stop: ${data.detail || "refused"}`);
    await this.refresh();
  }

  async continueTurn() {
    this.userStopped = false;
    const { ok, data } = await api("POST", turnPath(this.id, "/continue"), { auto: false });
    if (!ok) showError(`Continue: ${data.detail || "refused"}`);
    else this.continued();
    await this.refresh();
  }

  // Follow the turn's events until it ends; a dropped stream resumes after the last event seen.
  // The end is an ended status with its turn_ended read: a status that ended while the stream
  // was cut (an outage) still has events to read.
  async follow() {
    if (this.following) return;
    this.following = true;
    this.gaveUp = false;
    const timer = setInterval(() => this.refresh(), REFRESH_MS);
    try {
      for (;;) {
        const outcome = await readEvents(this.id, this.state.lastId, (id, event) => this.apply(id, event));
        if (outcome.reached) this.reached();
        else if (outcome.transient) await this.retryLater(outcome.transient, outcome.retryAfter);
        else if (outcome.fatal) {
          showError(`Events of ${this.id}: ${outcome.fatal}`);
          this.gaveUp = true;
        }
        await this.refresh();
        if ((this.ended && this.state.endSeen) || this.gaveUp) break;
        await sleep(300);
      }
    } finally {
      clearInterval(timer);
      this.following = false;
    }
  }

  // The events are out of reach (the server, or its Redis or broker, 503): wait, longer each
  // time, then try again from the last event; after GIVE_UP_MS in a row, stop.
  async retryLater(why, retryAfter) {
    this.notice = `${why} — reconnecting…`;
    showError(this.notice);
    if (!(await this.backoff.wait(retryAfter))) {
      this.notice = "";
      showError(`Events of ${this.id}: ${why} — gave up after ${GIVE_UP_MS / 60000} minutes; reload to try again`);
      this.gaveUp = true;
    }
  }

  reached() {
    if (this.notice && document.getElementById("error").textContent === this.notice) showError("");
    this.notice = "";
    this.backoff.reset();
  }
}
