// Conversations, as the server keeps them (GET /v1/conversations, GET /v1/conversations/{id}):
// the sidebar's list, the conversation shown with its turns, a new one, and sending a message.
// Every browser sees the same list; nothing of it is kept in this one.
import { api } from "./api.js";
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
  const box = $("turns");
  box.replaceChildren();
  for (const entry of data.turns) {
    const turn = turnOf(entry.turn_id, id, entry.message);
    box.append(turn.node);
    turn.follow();
  }
  if (!data.turns.length) box.append(el("p", { class: "empty", id: "empty", text: "Ask for something." }));
  location.hash = encodeURIComponent(id);
  renderList();
  closeMenu();
  box.lastElementChild?.scrollIntoView({ block: "end" });
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
    $("empty")?.remove();
    const turn = turnOf(data.turn_id, current.id, message);
    $("turns").append(turn.node);
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
