// Approval cards (docs/semantics.md). A call that needs a person's decision shows as an approval
// card where the model asked for it: the tool, its input in full, the expiry, and Approve /
// Deny. The page only ever decides on a click: automatic continuation never decides anything.
// The call's tool card appears once the ledger says what became of it: tool_start (approved,
// it runs) or tool_blocked (denied).
import { api, approverToken, keepApproverToken, turnPath } from "./api.js";
import { el } from "./dom.js";

// DRES_APPROVER_TOKENS is set: only an approver's own token decides (the tab's API token does
// not), so a pending card asks for it, and the decision's `by` is the server's to say (the name)
const APPROVERS = document.querySelector('meta[name="dres-approvers"]')?.content === "1";

// what a decided card says, by decision
const DECIDED = {
  approve: "Approved",
  deny: "Denied",
  expired: "Expired — nobody decided in time",
  voided: "Voided — the turn was stopped",
};

// The card's own state (what the ledger does not say): a decision on its way, the deny form,
// the reason typed so far, why the server refused the page's decision, and a decision the
// turn's GET reported before its event came.
function uiOf(turn, approvalId) {
  let ui = turn.approvalUi.get(approvalId);
  if (!ui) {
    ui = { busy: false, denying: false, draft: "", error: "", polled: null, node: null, drawn: null };
    turn.approvalUi.set(approvalId, ui);
  }
  return ui;
}

export function approvalNode(turn, approvalId) {
  const ui = uiOf(turn, approvalId);
  const { request } = turn.state.approvals[approvalId];
  ui.node = el("div", {
    class: "approval-card",
    "data-kind": "approval",
    "data-testid": "approval",
    "data-approval-id": approvalId,
    "data-call-id": request.call_id,
    tabindex: "-1",
    role: "group",
    "aria-label": `Approval of ${request.tool}`,
  });
  return ui.node;
}

// The turn's GET lists its requests with their decisions: a page whose stream lags (or a 409
// that says another decision came first) shows the decision without waiting for the event.
export function syncApprovals(turn, entries) {
  for (const entry of entries) {
    const ui = turn.approvalUi.get(entry.approval_id);
    if (ui && entry.decision) ui.polled = entry;
  }
}

async function decide(turn, approvalId, decision) {
  const ui = uiOf(turn, approvalId);
  const { request } = turn.state.approvals[approvalId];
  if (ui.busy || decisionOf(turn, approvalId)) return;
  if (APPROVERS && !approverToken()) {
    ui.error = "Paste your approver token first: only an approver decides here.";
    drawApproval(turn, approvalId);
    ui.node.querySelector('[data-testid="approver-token"]')?.focus();
    return;
  }
  ui.busy = true;
  ui.error = "";
  drawApproval(turn, approvalId);
  const body = { decision, signature: request.signature };
  if (!APPROVERS) body.by = "page";
  if (decision === "deny" && ui.draft.trim()) body.reason = ui.draft.trim();
  const path = turnPath(turn.id, `/approvals/${encodeURIComponent(approvalId)}`);
  const as = APPROVERS ? { ask: false, token: approverToken() } : {};
  const { ok, status, data } = await api("POST", path, body, as);
  ui.busy = false;
  if (!ok) {
    const detail = data.detail;
    const why = typeof detail === "string" ? detail : detail ? JSON.stringify(detail) : `HTTP ${status}`;
    ui.error = `Your ${decision} was not taken: ${why}`;
  } else {
    ui.denying = false;
  }
  drawApproval(turn, approvalId);
  await turn.refresh(); // the turn resumes (or still waits on another request)
}

function decisionOf(turn, approvalId) {
  return turn.state.approvals[approvalId]?.decided || turn.approvalUi.get(approvalId)?.polled || null;
}

function closeDeny(turn, approvalId) {
  const ui = uiOf(turn, approvalId);
  ui.denying = false;
  drawApproval(turn, approvalId);
  ui.node.querySelector('[data-testid="deny"]')?.focus();
}

// The approver's token, beside the buttons: typed once, kept for the tab, used by every card.
function approverField(approvalId) {
  const id = `approver-token-${approvalId}`;
  return el("div", { class: "approver" },
    el("label", { for: id, text: "Approver token" }),
    el("input", {
      id,
      type: "password",
      autocomplete: "off",
      "data-testid": "approver-token",
      value: approverToken(),
      oninput: (e) => keepApproverToken(e.target.value),
    }));
}

function buttons(turn, approvalId) {
  const actions = controls(turn, approvalId);
  return APPROVERS ? el("div", { class: "approval-controls" }, approverField(approvalId), actions) : actions;
}

function controls(turn, approvalId) {
  const ui = uiOf(turn, approvalId);
  const busy = ui.busy || null;
  if (ui.denying) {
    const reasonId = `deny-reason-${approvalId}`;
    const input = el("input", {
      id: reasonId,
      type: "text",
      class: "deny-reason",
      "data-testid": "deny-reason",
      maxlength: "2000",
      placeholder: "Why not? (optional, the model reads it)",
      value: ui.draft,
      oninput: (e) => { ui.draft = e.target.value; },
      onkeydown: (e) => {
        if (e.key !== "Escape") return;
        e.stopPropagation();
        closeDeny(turn, approvalId);
      },
    });
    return el("form", {
      class: "deny-form",
      onsubmit: (e) => {
        e.preventDefault();
        decide(turn, approvalId, "deny");
      },
    },
    el("label", { for: reasonId, text: "Reason" }),
    input,
    el("button", { type: "submit", class: "danger", "data-testid": "deny-confirm", text: "Deny", disabled: busy }),
    el("button", { type: "button", text: "Cancel", disabled: busy, onclick: () => closeDeny(turn, approvalId) }));
  }
  return el("div", { class: "approval-actions" },
    el("button", {
      type: "button", class: "primary", "data-testid": "approve", text: "Approve", disabled: busy,
      onclick: () => decide(turn, approvalId, "approve"),
    }),
    el("button", {
      type: "button", "data-testid": "deny", text: "Deny…", disabled: busy,
      onclick: () => {
        ui.denying = true;
        ui.error = "";
        drawApproval(turn, approvalId);
        ui.node.querySelector('[data-testid="deny-reason"]').focus();
      },
    }));
}

// Draw the card when what it shows changed.
export function drawApproval(turn, approvalId) {
  const ui = uiOf(turn, approvalId);
  const node = ui.node;
  const { request } = turn.state.approvals[approvalId];
  const decided = decisionOf(turn, approvalId);
  const state = decided ? decided.decision : "pending";
  const signature = JSON.stringify([state, decided, ui.busy, ui.denying, ui.error]);
  if (!node || ui.drawn === signature) return;
  ui.drawn = signature;
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
  if (ui.error) {
    parts.push(el("p", { class: "approval-error", role: "alert", "data-testid": "approval-error", text: ui.error }));
  }
  if (state === "pending") parts.push(buttons(turn, approvalId));
  node.replaceChildren(...parts);
  if (focused !== null) {
    // the focused control was replaced (or went away, decided): keep the place on the card
    const again = focused && node.querySelector(`[data-testid="${focused}"]:not([disabled])`);
    (again || node).focus();
  }
}
