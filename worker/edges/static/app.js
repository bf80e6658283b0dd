// dres's page: a chat over the public HTTP API (/v1/...), nothing else.
// Each turn is rebuilt from its ledger events (SSE, resumed with Last-Event-ID after a drop),
// so a reload or a reconnect shows every line once. Conversations are kept in localStorage: the
// API has no route that lists them.
"use strict";

const MAX_AUTO = Number(document.querySelector('meta[name="dres-max-auto-continue"]').content) || 0;
// stops a client may continue on its own (CONTRACT §7.7): cut off by time or a lost worker
const AUTO_CODES = new Set(["crashed", "handoff_lost", "max_chunks"]);
const ENDED = new Set(["completed", "stopped"]);
// ms the page waits before continuing a time-limit stop on its own (Stop cancels it meanwhile)
const AUTO_DELAY_MS = 1500;
// ms between looks at a live turn's status (the events say most; this catches the rest)
const REFRESH_MS = 2000;
// answers that mean "not now": the server or its store (Redis, the broker) is out of reach
const TRANSIENT = new Set([502, 503, 504]);
// ms before a turn's stream is tried again while out of reach: the first, doubling up to the
// last, or longer when the server's Retry-After says so
const RETRY_MS = [500, 10000];
// ms out of reach in a row after which the page stops following a turn (a reload tries again)
const GIVE_UP_MS = 10 * 60 * 1000;
const STORE_KEY = "dres.conversations";
const TOKEN_KEY = "dres.token";
// what a person reads beside the status word (the word itself is CONTRACT §10's)
const LABELS = {
  queued: "Waiting for a worker…",
  running: "Working…",
  resuming: "Resuming…",
  waiting: "Waiting for approval",
  completed: "Done",
  stopped: "Stopped",
};
const CAUSES = {
  first: "first run",
  next_chunk: "next chunk",
  redelivery: "redelivered",
  reaper: "picked up after a dead run",
  transport_error: "after a transport error",
  auto_continue: "continued automatically",
  continue: "continued",
  approval: "after a person's decision",
};

const $ = (id) => document.getElementById(id);
const turns = new Map(); // turn_id -> Turn
let current = null; // the conversation shown: {id, title, turns: [...], updated}
let inspected = null; // the turn the inspector shows

// -- storage ----------------------------------------------------------------------------------

function loadConversations() {
  try {
    const list = JSON.parse(localStorage.getItem(STORE_KEY) || "[]");
    return Array.isArray(list) ? list : [];
  } catch {
    return [];
  }
}

function saveConversation(conversation) {
  const others = loadConversations().filter((c) => c.id !== conversation.id);
  conversation.updated = Date.now();
  localStorage.setItem(STORE_KEY, JSON.stringify([conversation, ...others]));
}

// -- HTTP -------------------------------------------------------------------------------------

function headers(extra = {}) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  return token ? { ...extra, Authorization: `Bearer ${token}` } : extra;
}

function askToken() {
  const dialog = $("token-dialog");
  if (!dialog.pending) {
    dialog.pending = new Promise((resolve) => {
      dialog.addEventListener(
        "close",
        () => {
          sessionStorage.setItem(TOKEN_KEY, $("token-input").value.trim());
          dialog.pending = null;
          resolve();
        },
        { once: true },
      );
    });
    dialog.showModal();
    $("token-input").focus();
  }
  return dialog.pending;
}

async function api(method, path, body) {
  for (;;) {
    const init = { method, headers: headers(body ? { "Content-Type": "application/json" } : {}) };
    if (body) init.body = JSON.stringify(body);
    let response;
    try {
      response = await fetch(path, init);
    } catch {
      return { ok: false, status: 0, data: { detail: "the server cannot be reached" } };
    }
    if (response.status === 401) {
      await askToken();
      continue;
    }
    const data = await response.json().catch(() => ({}));
    return { ok: response.ok, status: response.status, data };
  }
}

function showError(message) {
  const el = $("error");
  el.textContent = message;
  el.hidden = !message;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function streamPos(id) {
  const [ms, seq] = id.split("-").map(Number);
  return [ms, seq];
}

function after(a, b) {
  const [am, as] = streamPos(a);
  const [bm, bs] = streamPos(b);
  return am > bm || (am === bm && as > bs);
}

// -- DOM helpers ------------------------------------------------------------------------------

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "text") node.textContent = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : value);
  }
  for (const child of children) if (child !== null && child !== undefined) node.append(child);
  return node;
}

function short(value, chars = 160) {
  const textForm = typeof value === "string" ? value : JSON.stringify(value);
  const flat = (textForm ?? "").replace(/\s+/g, " ");
  return flat.length > chars ? `${flat.slice(0, chars - 1)}…` : flat;
}

function time(ts) {
  return new Date(ts * 1000).toLocaleTimeString([], {
    hour: "2-digit", minute: "2-digit", second: "2-digit", fractionalSecondDigits: 1, hour12: false,
  });
}

// -- a turn -----------------------------------------------------------------------------------

class Turn {
  constructor(id, conversationId) {
    this.id = id;
    this.conversationId = conversationId;
    this.lastId = "0-0";
    this.events = []; // [{id, event}]
    this.text = "";
    this.textAtModelStart = 0;
    this.calls = new Map(); // call key -> {event, state, card, matched}
    this.approvals = new Map(); // approval_id -> an approval card's state (see "approvals" below)
    this.runs = []; // {run_id, chunk, epoch, cause, start, end, reason, note}
    this.status = "queued";
    this.code = "";
    this.canContinue = false;
    this.autoContinues = 0;
    this.following = false;
    this.autoTimer = null;
    this.userStopped = false;
    this.failures = 0; // attempts in a row that could not reach the turn's events
    this.failingSince = null;
    this.notice = ""; // the "reconnecting" line this turn shows, cleared once reached
    this.gaveUp = false;
    this.endSeen = false;
    this.build();
  }

  build() {
    this.answer = el("div", { class: "answer", "data-testid": "answer" });
    this.activity = el("ol", { class: "activity", "aria-label": "Tool calls" });
    this.statusWord = el("span", { "data-testid": "turn-status", class: "status-word" }, "queued");
    this.statusLabel = el("span", { class: "status-label" });
    this.autoCount = el("span", { class: "auto-count", "data-testid": "auto-continues" });
    this.actions = el("span", { class: "turn-actions" });
    this.question = el("p", { class: "user-message" });
    this.inspectButton = el("button", {
      type: "button",
      class: "link-button",
      text: "Inspect",
      onclick: () => openInspector(this),
    });
    this.node = el(
      "article",
      { class: "turn", "data-turn-id": this.id, "aria-label": "Turn" },
      this.question,
      el(
        "div",
        { class: "assistant" },
        this.activity,
        this.answer,
        el(
          "footer",
          { class: "turn-bar" },
          el("span", { class: "status", role: "status" }, this.statusWord, this.statusLabel),
          this.autoCount,
          this.actions,
          this.inspectButton,
        ),
      ),
    );
    this.render();
  }

  // Every event once, in stream order: one with a stream id not after the last seen is dropped.
  apply(id, event) {
    if (!after(id, this.lastId)) return;
    this.lastId = id;
    this.endSeen = event.type === "turn_ended"; // nothing after it yet: the stream is read out
    this.events.push({ id, event });
    const handler = this[`on_${event.type}`];
    if (handler) handler.call(this, event, id);
    if (inspected === this) {
      renderInspector();
      if (event.type === "tool_done" || event.type === "turn_ended") loadJournal(this);
    }
  }

  on_turn_started(event) {
    this.question.textContent = event.message;
  }

  on_run_started(event) {
    this.runs.push({
      run_id: event.run_id,
      chunk: event.chunk,
      epoch: event.epoch,
      cause: event.cause,
      start: event.ts,
      end: null,
      reason: null,
      note: null,
    });
    this.setStatus("running");
    if (event.cause !== "first") this.marker(`Resuming… (${CAUSES[event.cause] || event.cause})`);
  }

  on_resumed(event) {
    const run = this.runs.find((r) => r.run_id === event.run_id);
    if (run) run.note = event.note;
  }

  // Each model call's text is its own paragraph; the answer's text is theirs joined as written.
  on_model_start() {
    this.textAtModelStart = this.text.length;
    this.segment = null;
  }

  on_text(event) {
    this.text += event.text;
    if (!this.segment) {
      this.segment = el("p", { class: "segment" });
      this.answer.append(this.segment);
    }
    this.segment.textContent += event.text;
  }

  on_clear() {
    this.text = this.text.slice(0, this.textAtModelStart);
    if (this.segment) this.segment.textContent = "";
  }

  callKey(event, id) {
    return event.call_id || `${event.tool}@${id}`;
  }

  on_tool_start(event, id) {
    this.card(this.callKey(event, id), event, "running");
  }

  on_tool_done(event) {
    const open = [...this.calls.values()].find(
      (c) => c.state === "running" && (event.call_id ? c.event.call_id === event.call_id : c.event.tool === event.tool),
    );
    if (!open) return;
    open.result = event.result;
    this.setCard(open, event.is_error ? "error" : "completed");
  }

  on_tool_blocked(event, id) {
    const state = { completed: "blocked", reconciled: "completed" }[event.reason] || "refused";
    const matched = [...this.calls.values()].find(
      (c) => event.matched_call_id && c.event.call_id === event.matched_call_id,
    );
    const call = this.card(this.callKey(event, id), event, state);
    call.result = event.result;
    call.reason = event.reason;
    // a denied call matched nothing: a person refused it
    if (event.reason !== "denied") call.matched = matched ? matched.event : { call_id: event.matched_call_id };
    this.setCard(call, state);
  }

  // A call that waits for a person: its approval card (the tool card comes once it runs or is
  // refused, see showApproval).
  on_approval_requested(event) {
    showApproval(this, event);
  }

  on_approval_decided(event) {
    recordDecision(this, event);
    this.refreshSoon(); // waiting, or resuming once the last open request is decided
  }

  on_run_ended(event) {
    const run = this.runs.find((r) => r.run_id === event.run_id);
    if (run) Object.assign(run, { end: event.ts, reason: event.reason, detail: event.detail });
    if (event.reason !== "completed") {
      for (const call of this.calls.values()) {
        if (call.state === "running") this.setCard(call, "interrupted");
      }
    }
    if (event.reason === "soft_limit" || event.reason === "transport_error") this.setStatus("resuming");
    if (event.reason === "waiting") this.setStatus("waiting"); // no run holds it: a person decides
  }

  on_turn_ended(event) {
    this.code = event.code;
    this.canContinue = event.can_continue;
    for (const run of this.runs) if (run.end === null) run.end = event.ts;
    this.setStatus(event.status);
    this.refreshSoon();
  }

  marker(textContent) {
    this.activity.append(el("li", { class: "marker", text: textContent }));
  }

  card(key, event, state) {
    let call = this.calls.get(key);
    if (!call) {
      call = { event, state, result: undefined, matched: null, reason: null };
      call.node = el("li", { class: "tool-card", "data-testid": "tool-call", "data-call-id": event.call_id });
      this.calls.set(key, call);
      this.activity.append(call.node);
    }
    this.setCard(call, state);
    return call;
  }

  setCard(call, state) {
    call.state = state;
    const node = call.node;
    node.dataset.state = state;
    const stateText = {
      running: "running",
      completed: "completed",
      error: "error",
      interrupted: "interrupted — outcome unknown",
      blocked: "blocked — exact repeat, not run",
      refused: call.reason === "denied" ? "refused — denied by a person" : "refused — retry not run",
    }[state];
    const parts = [
      el("div", { class: "card-head" },
        el("span", { class: "tool-name", text: call.event.tool }),
        el("span", { class: `badge badge-${state}`, text: stateText })),
      el("div", { class: "card-row" }, el("span", { class: "k", text: "input" }),
        el("code", { text: short(call.event.input) })),
    ];
    if (call.result !== undefined) {
      parts.push(el("div", { class: "card-row" }, el("span", { class: "k", text: "result" }),
        el("code", { text: short(call.result) })));
    }
    if (call.matched) {
      const m = call.matched;
      const same = m.tool === call.event.tool && JSON.stringify(m.input) === JSON.stringify(call.event.input);
      const what = same ? "the same call, completed earlier" : m.tool ? `${m.tool} ${short(m.input, 80)}` : "";
      parts.push(el("div", { class: "card-row matched" }, el("span", { class: "k", text: "matched" }),
        el("code", { text: `${what} (${m.call_id || "?"})` })));
    }
    node.replaceChildren(...parts);
  }

  setStatus(status) {
    this.status = status;
    this.render();
  }

  async refresh() {
    const { ok, data } = await api("GET", `/v1/turns/${encodeURIComponent(this.id)}`);
    if (!ok) return;
    this.status = data.status;
    this.code = data.code;
    this.canContinue = data.can_continue;
    this.autoContinues = data.auto_continues;
    this.conversationId = data.conversation_id;
    syncApprovals(this, data.approvals || []);
    this.render();
    this.considerAuto();
  }

  refreshSoon() {
    clearTimeout(this.refreshTimer);
    this.refreshTimer = setTimeout(() => this.refresh(), 50);
  }

  newest() {
    const conversation = loadConversations().find((c) => c.id === this.conversationId);
    return !conversation || conversation.turns[conversation.turns.length - 1] === this.id;
  }

  // A time-limit stop of the conversation's newest turn continues on its own (§7.7), at most
  // MAX_AUTO times; Stop pressed meanwhile cancels it.
  considerAuto() {
    const wanted =
      this.status === "stopped" && AUTO_CODES.has(this.code) && this.canContinue &&
      this.autoContinues < MAX_AUTO && $("auto-continue").checked && !this.userStopped &&
      this.newest();
    if (!wanted || this.autoTimer) return;
    this.autoTimer = setTimeout(async () => {
      this.autoTimer = null;
      if (this.userStopped) return this.render();
      const { ok } = await api("POST", `/v1/turns/${encodeURIComponent(this.id)}/continue`, { auto: true });
      if (ok) {
        this.status = "queued";
        this.marker(`Resuming… (continued automatically, ${this.autoContinues + 1} of ${MAX_AUTO})`);
        this.follow();
      }
      await this.refresh();
    }, AUTO_DELAY_MS);
    this.render();
  }

  async stop() {
    this.userStopped = true;
    if (this.autoTimer) {
      clearTimeout(this.autoTimer);
      this.autoTimer = null;
      this.render();
      return;
    }
    const { ok, data } = await api("POST", `/v1/turns/${encodeURIComponent(this.id)}/stop`);
    if (!ok) showError(`Stop: ${data.detail || "refused"}`);
    await this.refresh();
  }

  async continueTurn() {
    this.userStopped = false;
    const { ok, data } = await api("POST", `/v1/turns/${encodeURIComponent(this.id)}/continue`, { auto: false });
    if (!ok) {
      showError(`Continue: ${data.detail || "refused"}`);
    } else {
      this.status = "queued";
      this.follow();
    }
    await this.refresh();
  }

  render() {
    const status = this.status;
    this.statusWord.textContent = status;
    this.node.dataset.status = status;
    const why = this.code ? `: ${this.code.replaceAll("_", " ")}` : "";
    let label = LABELS[status] || status;
    if (status === "queued" && this.runs.length) label = LABELS.resuming; // continued: a new run waits
    if (status === "stopped") label = `Stopped${why}${this.canContinue ? " — Continue is available" : ""}`;
    if (this.autoTimer) label = `Stopped${why} — continuing on its own in a moment (Stop cancels)`;
    this.statusLabel.textContent = label;
    this.autoCount.textContent = this.autoContinues
      ? `auto-continued ${this.autoContinues} of ${MAX_AUTO}`
      : "";
    const buttons = [];
    if (!ENDED.has(status) || this.autoTimer) {
      buttons.push(el("button", { type: "button", "data-testid": "stop", text: "Stop", onclick: () => this.stop() }));
    }
    if (status === "stopped" && this.canContinue && !this.autoTimer) {
      buttons.push(el("button", {
        type: "button", class: "primary", "data-testid": "continue", text: "Continue",
        onclick: () => this.continueTurn(),
      }));
    }
    const focused = this.actions.contains(document.activeElement) ? document.activeElement.dataset.testid : null;
    this.actions.replaceChildren(...buttons);
    if (focused) {
      const again = this.actions.querySelector(`[data-testid="${focused}"]`);
      (again || this.inspectButton).focus();
    }
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
        await this.readStream();
        await this.refresh();
        if ((ENDED.has(this.status) && this.endSeen) || this.gaveUp) break;
        await sleep(300);
      }
    } finally {
      clearInterval(timer);
      this.following = false;
    }
  }

  async readStream() {
    const extra = this.lastId === "0-0" ? {} : { "Last-Event-ID": this.lastId };
    let response;
    try {
      response = await fetch(`/v1/turns/${encodeURIComponent(this.id)}/events`, { headers: headers(extra) });
    } catch {
      return this.retryLater("the server cannot be reached");
    }
    if (response.status === 401) return askToken();
    if (!response.ok) {
      const data = await response.json().catch(() => ({}));
      const why = data.detail || `HTTP ${response.status}`;
      if (TRANSIENT.has(response.status)) return this.retryLater(why, response.headers.get("Retry-After"));
      showError(`Events of ${this.id}: ${why}`);
      this.status = "stopped";
      this.gaveUp = true;
      return;
    }
    this.reached();
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value.replaceAll("\r\n", "\n");
        let end;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          this.message(buffer.slice(0, end));
          buffer = buffer.slice(end + 2);
        }
      }
    } catch {
      // a dropped connection: the caller reconnects with Last-Event-ID
    }
  }

  // The events are out of reach (the server, or its Redis or broker, 503): wait, longer each
  // time, then the caller tries again from the last event; after GIVE_UP_MS in a row, stop.
  async retryLater(why, retryAfter) {
    const now = Date.now();
    this.failingSince ??= now;
    if (now - this.failingSince > GIVE_UP_MS) {
      this.notice = "";
      showError(`Events of ${this.id}: ${why} — gave up after ${GIVE_UP_MS / 60000} minutes; reload to try again`);
      this.gaveUp = true;
      return;
    }
    this.notice = `${why} — reconnecting…`;
    showError(this.notice);
    const wait = Math.min(RETRY_MS[1], RETRY_MS[0] * 2 ** this.failures);
    this.failures += 1;
    await sleep(Math.max(wait, (Number(retryAfter) || 0) * 1000));
  }

  reached() {
    if (this.notice && $("error").textContent === this.notice) showError("");
    this.notice = "";
    this.failures = 0;
    this.failingSince = null;
  }

  message(block) {
    let id = "";
    const data = [];
    for (const line of block.split("\n")) {
      if (line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const name = colon < 0 ? line : line.slice(0, colon);
      const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
      if (name === "id") id = value;
      else if (name === "data") data.push(value);
    }
    if (!id || !data.length) return;
    try {
      this.apply(id, JSON.parse(data.join("\n")));
    } catch (error) {
      console.warn("skipped a malformed event", id, error);
    }
  }
}

// -- conversations ----------------------------------------------------------------------------

function renderConversations() {
  const list = $("conversations");
  list.replaceChildren(
    ...loadConversations().map((c) =>
      el("li", {},
        el("button", {
          type: "button",
          class: "conversation",
          "aria-current": current && current.id === c.id ? "page" : null,
          text: c.title || c.id,
          onclick: () => showConversation(c.id),
        })),
    ),
  );
}

function turnOf(id, conversationId) {
  let turn = turns.get(id);
  if (!turn) {
    turn = new Turn(id, conversationId);
    turns.set(id, turn);
  }
  return turn;
}

function showConversation(id) {
  current = loadConversations().find((c) => c.id === id) || null;
  const box = $("turns");
  box.replaceChildren();
  if (!current) {
    box.append($("empty") || el("p", { class: "empty", text: "Ask for something." }));
  } else {
    for (const turnId of current.turns) {
      const turn = turnOf(turnId, current.id);
      box.append(turn.node);
      turn.follow();
    }
    location.hash = encodeURIComponent(current.id);
  }
  renderConversations();
  closeMenu();
  box.lastElementChild?.scrollIntoView({ block: "end" });
}

function newConversation() {
  current = null;
  history.replaceState(null, "", location.pathname);
  $("turns").replaceChildren(el("p", { class: "empty", id: "empty", text: "A new conversation. Ask for something." }));
  renderConversations();
  closeMenu();
  $("composer").focus();
}

async function send(event) {
  event.preventDefault();
  const box = $("composer");
  const message = box.value;
  if (!message.trim()) return;
  showError("");
  $("composer-form").querySelector("button").disabled = true;
  try {
    const body = { message, mode: "foreground" };
    if (current) body.conversation_id = current.id;
    const { ok, data } = await api("POST", "/v1/turns", body);
    if (!ok) return showError(data.detail || "the turn was refused");
    box.value = "";
    if (!current) current = { id: data.conversation_id, title: short(message, 48), turns: [] };
    const earlier = current.turns.map((id) => turns.get(id)).filter(Boolean);
    current.turns.push(data.turn_id);
    saveConversation(current);
    $("empty")?.remove();
    const turn = turnOf(data.turn_id, current.id);
    turn.question.textContent = message;
    $("turns").append(turn.node);
    turn.node.scrollIntoView({ block: "end" });
    location.hash = encodeURIComponent(current.id);
    renderConversations();
    turn.follow();
    // the earlier turns' stops are no longer the conversation's newest: Continue goes away
    for (const old of earlier) old.refresh();
  } finally {
    $("composer-form").querySelector("button").disabled = false;
  }
}

// -- approvals (CONTRACT §7.14) ---------------------------------------------------------------
// A call that needs a person's decision shows as an approval card where the model asked for it:
// the tool, its input in full, the expiry, and Approve / Deny. The page only ever decides on a
// click: automatic continuation never decides anything. The call's tool card appears once the
// ledger says what became of it: tool_start (approved, it runs) or tool_blocked (denied).

// what a decided card says, by decision
const DECIDED = {
  approve: "Approved",
  deny: "Denied",
  expired: "Expired — nobody decided in time",
  voided: "Voided — the turn was stopped",
};

function showApproval(turn, event) {
  let approval = turn.approvals.get(event.approval_id);
  if (!approval) {
    approval = {
      request: event,
      state: "pending", // pending | approve | deny | expired | voided
      decided: null, // the approval_decided event (or the turn's approvals entry)
      busy: false, // a decision is on its way
      denying: false, // the deny form is open
      draft: "", // the reason typed so far
      error: "", // why the server refused the page's decision (a 409's detail)
    };
    approval.node = el("li", {
      class: "approval-card",
      "data-testid": "approval",
      "data-approval-id": event.approval_id,
      "data-call-id": event.call_id,
      tabindex: "-1",
      "aria-label": `Approval of ${event.tool}`,
    });
    turn.approvals.set(event.approval_id, approval);
    turn.activity.append(approval.node);
  }
  renderApproval(turn, approval);
}

function recordDecision(turn, event) {
  const approval = turn.approvals.get(event.approval_id);
  if (!approval) return;
  approval.decided = event;
  approval.state = event.decision;
  approval.busy = false;
  approval.denying = false;
  renderApproval(turn, approval);
}

// The turn's GET lists its requests with their decisions: a page whose stream lags (or a 409
// that says another decision came first) shows the decision without waiting for the event.
function syncApprovals(turn, entries) {
  for (const entry of entries) {
    const approval = turn.approvals.get(entry.approval_id);
    if (approval && entry.decision && approval.state === "pending") recordDecision(turn, entry);
  }
}

async function decide(turn, approval, decision) {
  if (approval.busy || approval.state !== "pending") return;
  approval.busy = true;
  approval.error = "";
  renderApproval(turn, approval);
  const { request } = approval;
  const path = `/v1/turns/${encodeURIComponent(turn.id)}/approvals/${encodeURIComponent(request.approval_id)}`;
  const body = { decision, signature: request.signature, by: "page" };
  if (decision === "deny" && approval.draft.trim()) body.reason = approval.draft.trim();
  const { ok, status, data } = await api("POST", path, body);
  approval.busy = false;
  if (!ok) {
    const detail = data.detail;
    const why = typeof detail === "string" ? detail : detail ? JSON.stringify(detail) : `HTTP ${status}`;
    approval.error = `Your ${decision} was not taken: ${why}`;
  } else {
    approval.denying = false;
  }
  renderApproval(turn, approval);
  await turn.refresh(); // the turn resumes (or still waits on another request)
}

function approvalButtons(turn, approval) {
  const busy = approval.busy || null;
  if (approval.denying) {
    const reasonId = `deny-reason-${approval.request.approval_id}`;
    const input = el("input", {
      id: reasonId,
      type: "text",
      class: "deny-reason",
      "data-testid": "deny-reason",
      maxlength: "2000",
      placeholder: "Why not? (optional, the model reads it)",
      value: approval.draft,
      oninput: (e) => { approval.draft = e.target.value; },
      onkeydown: (e) => {
        if (e.key !== "Escape") return;
        e.stopPropagation();
        approval.denying = false;
        renderApproval(turn, approval);
        approval.node.querySelector('[data-testid="deny"]')?.focus();
      },
    });
    const form = el("form", {
      class: "deny-form",
      onsubmit: (e) => {
        e.preventDefault();
        decide(turn, approval, "deny");
      },
    },
    el("label", { for: reasonId, text: "Reason" }),
    input,
    el("button", { type: "submit", class: "danger", "data-testid": "deny-confirm", text: "Deny", disabled: busy }),
    el("button", {
      type: "button", text: "Cancel", disabled: busy,
      onclick: () => {
        approval.denying = false;
        renderApproval(turn, approval);
        approval.node.querySelector('[data-testid="deny"]')?.focus();
      },
    }));
    return form;
  }
  const row = el("div", { class: "approval-actions" },
    el("button", {
      type: "button", class: "primary", "data-testid": "approve", text: "Approve", disabled: busy,
      onclick: () => decide(turn, approval, "approve"),
    }),
    el("button", {
      type: "button", "data-testid": "deny", text: "Deny…", disabled: busy,
      onclick: () => {
        approval.denying = true;
        approval.error = "";
        renderApproval(turn, approval);
        approval.node.querySelector('[data-testid="deny-reason"]').focus();
      },
    }));
  return row;
}

function renderApproval(turn, approval) {
  const { request, state, decided } = approval;
  const node = approval.node;
  const focused = node.contains(document.activeElement) ? document.activeElement.dataset.testid || "" : null;
  node.dataset.state = state;
  const badge = state === "pending" ? "waiting for a decision" : DECIDED[state] || state;
  const parts = [
    el("div", { class: "card-head" },
      el("span", { class: "approval-title", text: state === "pending" ? "Approval needed" : "Approval" }),
      el("span", { class: "tool-name", text: request.tool }),
      el("span", { class: `badge badge-approval-${state}`, text: badge })),
    el("pre", { class: "approval-input", "data-testid": "approval-input", text: JSON.stringify(request.input, null, 2) }),
  ];
  if (state === "pending") {
    parts.push(el("p", { class: "muted approval-expiry", text: `Expires ${new Date(request.expires_at * 1000).toLocaleString()}` }));
  } else {
    const who = decided.by ? ` by ${decided.by}` : "";
    const reason = decided.reason ? `: ${decided.reason}` : "";
    const what = state === "approve" || state === "deny" ? `${DECIDED[state]}${who}${reason}` : `${DECIDED[state] || state}${reason}`;
    parts.push(el("p", { class: "approval-decision", "data-testid": "approval-decision", text: what }));
  }
  if (approval.error) {
    parts.push(el("p", { class: "approval-error", role: "alert", "data-testid": "approval-error", text: approval.error }));
  }
  if (state === "pending") parts.push(approvalButtons(turn, approval));
  node.replaceChildren(...parts);
  if (focused !== null) {
    // the focused control was replaced (or went away, decided): keep the place on the card
    const again = focused && node.querySelector(`[data-testid="${focused}"]:not([disabled])`);
    (again || node).focus();
  }
}

// -- inspector --------------------------------------------------------------------------------

function openInspector(turn) {
  inspected = turn;
  $("inspector").hidden = false;
  document.body.classList.add("inspecting");
  renderInspector();
  loadJournal(turn);
  $("inspector-close").focus();
}

function closeInspector() {
  const turn = inspected;
  inspected = null;
  $("inspector").hidden = true;
  document.body.classList.remove("inspecting");
  turn?.inspectButton.focus();
}

async function loadJournal(turn) {
  const { ok, data } = await api("GET", `/v1/turns/${encodeURIComponent(turn.id)}/journal`);
  if (ok && inspected === turn) {
    turn.journal = data;
    renderInspector();
  }
}

function section(title, ...children) {
  return el("section", { class: "inspector-section" }, el("h3", { text: title }), ...children);
}

function runsTimeline(turn) {
  const runs = turn.runs;
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

function journalList(turn) {
  const journal = turn.journal;
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

function renderInspector() {
  const turn = inspected;
  if (!turn) return;
  $("inspector-title").textContent = `Turn ${turn.id.slice(0, 18)}…`;
  const notes = turn.runs.filter((r) => r.note);
  const stopped = [...turn.calls.values()].filter((c) => c.state === "blocked" || c.state === "refused");
  $("inspector-body").replaceChildren(
    section("Runs", runsTimeline(turn)),
    section("Journal", journalList(turn)),
    section("Notes given to the model on resume", notes.length
      ? el("div", {}, ...notes.map((r) => el("figure", {},
        el("figcaption", { text: `${CAUSES[r.cause] || r.cause}, chunk ${r.chunk}` }),
        el("pre", { class: "note", text: r.note }))))
      : el("p", { class: "muted", text: "None: no run resumed with a journal to report." })),
    section("Blocked and refused calls", stopped.length
      ? el("ul", { class: "plain" }, ...stopped.map((c) => el("li", {},
        el("span", { class: `badge badge-${c.state}`, text: `${c.state} (${c.reason})` }), " ",
        el("code", { text: `${c.event.tool} ${short(c.event.input, 100)}` }),
        c.matched
          ? el("div", { class: "muted", text: `matched ${c.matched.call_id || "?"}${c.matched.tool ? ` — ${c.matched.tool} ${short(c.matched.input, 80)}` : ""}` })
          : el("div", { class: "muted", text: short(c.result, 160) }))))
      : el("p", { class: "muted", text: "None." })),
    section("Raw events", el("div", { class: "raw" }, el("table", {},
      el("thead", {}, el("tr", {}, ...["stream id", "chunk", "type", "detail"].map((h) => el("th", { scope: "col", text: h })))),
      el("tbody", {}, ...turn.events.map(({ id, event }) => {
        const { v, event_id, turn_id, run_id, chunk, ts, type, ...rest } = event;
        return el("tr", {}, el("td", { text: id }), el("td", { text: String(chunk) }),
          el("td", { text: type }), el("td", {}, el("code", { text: short(rest, 200) })));
      }))))),
  );
}

// -- start ------------------------------------------------------------------------------------

function closeMenu() {
  document.body.classList.remove("menu-open");
  $("menu-toggle").setAttribute("aria-expanded", "false");
}

function start() {
  $("composer-form").addEventListener("submit", send);
  $("composer").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      $("composer-form").requestSubmit();
    }
  });
  $("new-conversation").addEventListener("click", newConversation);
  $("inspector-close").addEventListener("click", closeInspector);
  document.addEventListener("keydown", (event) => {
    if (event.key !== "Escape") return;
    if (document.body.classList.contains("menu-open")) {
      closeMenu();
      $("menu-toggle").focus();
    } else if (inspected) {
      closeInspector();
    }
  });
  $("menu-close").addEventListener("click", () => {
    closeMenu();
    $("menu-toggle").focus();
  });
  $("menu-toggle").addEventListener("click", () => {
    const open = document.body.classList.toggle("menu-open");
    $("menu-toggle").setAttribute("aria-expanded", String(open));
    if (open) $("new-conversation").focus();
  });
  const auto = $("auto-continue");
  auto.checked = localStorage.getItem("dres.autoContinue") !== "0";
  auto.addEventListener("change", () => localStorage.setItem("dres.autoContinue", auto.checked ? "1" : "0"));
  const wanted = decodeURIComponent(location.hash.slice(1));
  const known = loadConversations();
  if (wanted && known.some((c) => c.id === wanted)) showConversation(wanted);
  else renderConversations();
}

start();
