// Conversations, as the server keeps them (GET /v1/conversations, GET /v1/conversations/{id}):
// the sidebar's list, the conversation shown with its turns, a new one, sending a message, and
// forks (Regenerate, Edit: POST /v1/turns/{id}/fork). A turn a fork replaced stays in the list,
// shown collapsed with the others replaced beside it, never as the answer (docs/page.md).
// Every browser sees the same list; nothing of it is kept in this one.
import { api, turnPath } from "./api.js";
import { $, el, short, showError } from "./dom.js";
import { openInspector } from "./inspector.js";
import { Turn } from "./turn.js";

// ms between looks at the list (another browser, or the CLI, may have started a conversation)
const LIST_MS = 10000;

const turns = new Map(); // turn_id -> Turn
let listed = []; // the server's list, most recently updated first
let current = null; // the conversation shown: {id, title, turns: [turn_id, …]}
let settings = { maxAuto: 0, autoOn: () => true };
let shown = 0; // which showConversation call is the newest (an older answer arriving late is dropped)
let forking = false; // a fork's request is on its way: no other is offered meanwhile
let redrawing = false; // a redraw of the shown turns' controls is due (one for many changes)
const groups = new Map(); // first replaced turn's id -> its collapsed group (kept open or shut)

// statuses of a live turn (docs/semantics.md): while one of the conversation's is, no fork is
// offered (a fork would stop it; Stop is the way to do that)
const LIVE = new Set(["queued", "running", "resuming"]);

const FORKS = {
  can: forkable,
  fork,
  changed: () => {
    if (redrawing) return;
    redrawing = true;
    queueMicrotask(() => {
      redrawing = false;
      for (const id of current?.turns || []) turns.get(id)?.update();
    });
  },
};

function isNewest(turn) {
  if (current && current.id === turn.conversationId) return current.turns[current.turns.length - 1] === turn.id;
  const entry = listed.find((c) => c.conversation_id === turn.conversationId);
  return !entry || entry.turn_id === turn.id;
}

function turnOf(id, conversationId, message) {
  let turn = turns.get(id);
  if (!turn) {
    turn = new Turn(id, {
      conversationId,
      message,
      maxAuto: settings.maxAuto,
      autoOn: settings.autoOn,
      isNewest,
      onInspect: openInspector,
      onEnded: () => refreshList(),
      forks: FORKS,
    });
    turns.set(id, turn);
  }
  return turn;
}

export async function refreshList() {
  const { ok, status, data } = await api("GET", "/v1/conversations", undefined, { ask: false });
  if (status === 401) {
    $("conversations").replaceChildren(el("li", { class: "muted", text: "The list needs the server's token: send a message to give it." }));
  }
  if (!ok) return;
  listed = data.items || [];
  renderList();
}

function renderList() {
  const list = $("conversations");
  if (!listed.length) {
    list.replaceChildren(el("li", { class: "muted", text: "No conversation yet." }));
    return;
  }
  list.replaceChildren(
    ...listed.map((c) =>
      el("li", {},
        el("button", {
          type: "button",
          class: "conversation",
          "data-testid": "conversation",
          "data-conversation-id": c.conversation_id,
          "aria-current": current && current.id === c.conversation_id ? "page" : null,
          onclick: () => showConversation(c.conversation_id),
        },
        el("span", { class: "conversation-title", text: c.title || c.conversation_id }),
        el("span", { class: "conversation-status", text: c.status })))),
  );
}

export async function showConversation(id) {
  const mine = ++shown;
  const { ok, status, data } = await api("GET", `/v1/conversations/${encodeURIComponent(id)}`);
  if (mine !== shown) return;
  if (!ok) {
    showError(status === 404 ? "That conversation is gone." : `Conversation: ${data.detail || `HTTP ${status}`}`);
    return newConversation();
  }
  current = { id, title: data.title, turns: data.turns.map((t) => t.turn_id) };
  groups.clear();
  for (const entry of data.turns) {
    const turn = turnOf(entry.turn_id, id, entry.message);
    if (entry.replaced_by && turn.replacedBy !== entry.replaced_by) turn.replaced(entry.replaced_by);
  }
  drawTurns();
  if (!data.turns.length) $("turns").append(el("p", { class: "empty", id: "empty", text: "Ask for something." }));
  for (const entry of data.turns) turns.get(entry.turn_id).follow();
  location.hash = encodeURIComponent(id);
  renderList();
  closeMenu();
  $("turns").lastElementChild?.scrollIntoView({ block: "end" });
}

// The shown conversation's turns in order; each run of turns a fork replaced is one collapsed
// group (a <details>) where they stood, just before the answer that took their place.
function drawTurns() {
  const children = [];
  let members = null;
  for (const id of current.turns) {
    const turn = turns.get(id);
    if (!turn) continue;
    if (!turn.replacedBy) {
      members = null;
      children.push({ node: turn.node });
    } else if (members) {
      members.push(turn);
    } else {
      members = [turn];
      children.push({ node: groupOf(id), members });
    }
  }
  for (const { node, members: replaced } of children) if (replaced) fillGroup(node, replaced);
  $("turns").replaceChildren(...children.map((c) => c.node));
}

function groupOf(firstId) {
  let node = groups.get(firstId);
  if (!node) {
    node = el("details", { class: "replaced", "data-testid": "replaced" },
      el("summary", {}), el("div", { class: "replaced-turns" }));
    groups.set(firstId, node);
  }
  return node;
}

function fillGroup(node, members) {
  const fork = turns.get(members[members.length - 1].replacedBy);
  const said = (turn) => turn.state.message ?? turn.message;
  const how = fork && said(fork) !== said(members[0]) ? "an edit" : "a regenerate";
  const n = members.length;
  node.querySelector("summary").textContent = n === 1
    ? `Replaced: 1 earlier answer (${how} took its place)`
    : `Replaced: ${n} earlier answers (${how} took their place)`;
  node.querySelector(".replaced-turns").replaceChildren(...members.map((t) => t.node));
}

// Whether the turn offers a fork now: it is the shown conversation's and not replaced, no turn
// of the conversation is live or about to continue on its own, no fork is on its way;
// Regenerate is on the newest answer only.
function forkable(turn, kind) {
  if (forking || !current || turn.conversationId !== current.id || turn.replacedBy) return false;
  if (!current.turns.includes(turn.id)) return false;
  const busy = (other) => other && (LIVE.has(other.status) || other.autoTimer);
  if (current.turns.some((id) => busy(turns.get(id)))) return false;
  return kind === "edit" || isNewest(turn);
}

// A fork at the turn (Regenerate: its own message; Edit: `message`), followed as a sent message
// is: the turns it replaces are marked so, the fork's turn is drawn where the answer goes.
async function fork(turn, message) {
  if (!forkable(turn, message === undefined ? "regenerate" : "edit")) return false;
  forking = true;
  FORKS.changed();
  showError("");
  const conversation = current;
  try {
    const body = message === undefined ? {} : { message };
    const { ok, data } = await api("POST", turnPath(turn.id, "/fork"), body);
    if (!ok) {
      const what = message === undefined ? "Regenerate" : "Edit";
      showError(`${what}: ${typeof data.detail === "string" ? data.detail : "the fork was refused"}`);
      return false;
    }
    for (const id of data.replaces || []) turns.get(id)?.replaced(data.turn_id);
    if (current !== conversation) {
      // shown again meanwhile (its answer may predate the fork), or another one is shown now
      if (current?.id === conversation.id) showConversation(current.id);
      return true;
    }
    const forked = turnOf(data.turn_id, conversation.id, message ?? turn.state.message ?? turn.message);
    if (!conversation.turns.includes(data.turn_id)) conversation.turns.push(data.turn_id);
    drawTurns();
    forked.node.scrollIntoView({ block: "end" });
    $("composer").focus();
    forked.follow();
    return true;
  } finally {
    forking = false;
    FORKS.changed();
    refreshList();
  }
}

export function newConversation() {
  shown += 1;
  current = null;
  history.replaceState(null, "", location.pathname);
  $("turns").replaceChildren(el("p", { class: "empty", id: "empty", text: "A new conversation. Ask for something." }));
  renderList();
  closeMenu();
  $("composer").focus();
}

export async function send(event) {
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
    const turn = turnOf(data.turn_id, current.id, message);
    drawTurns();
    turn.node.scrollIntoView({ block: "end" });
    location.hash = encodeURIComponent(current.id);
    turn.follow();
    refreshList();
    // the earlier turns' stops are no longer the conversation's newest: Continue goes away
    for (const old of earlier) old.refresh();
  } finally {
    $("composer-form").querySelector("button").disabled = false;
  }
}

export function closeMenu() {
  document.body.classList.remove("menu-open");
  $("menu-toggle").setAttribute("aria-expanded", "false");
}

export function startConversations(options) {
  settings = options;
  const wanted = decodeURIComponent(location.hash.slice(1));
  if (wanted) showConversation(wanted);
  refreshList();
  setInterval(() => {
    if (document.visibilityState === "visible") refreshList();
  }, LIST_MS);
}
