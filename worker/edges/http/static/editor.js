// The inline editor of a user message (docs/page.md): Edit puts it in the message's place, the
// person changes the text and sends it — a fork at that turn with the new message, which
// replaces the turn and every later one — or cancels (Escape too) and nothing happens. What was
// typed lives on the turn (turn.editor), so a redraw of the turn keeps it.
import { el } from "./dom.js";

export function openEditor(turn) {
  turn.editor = { draft: turn.state.message ?? turn.message ?? "", busy: false };
  turn.update();
  const box = turn.view.editor?.querySelector("textarea");
  if (box) {
    box.focus();
    box.setSelectionRange(box.value.length, box.value.length);
  }
}

// `refocus`: the Edit button takes the focus back (a cancel; a sent edit leaves the turn)
export function closeEditor(turn, refocus = true) {
  turn.editor = null;
  turn.update();
  if (refocus) turn.view.questionActions.querySelector('[data-testid="edit"]')?.focus();
}

async function submit(turn, form) {
  const ui = turn.editor;
  if (!ui || ui.busy || !ui.draft.trim() || !turn.canFork("edit")) return;
  ui.busy = true;
  for (const button of form.querySelectorAll("button")) button.disabled = true;
  const ok = await turn.edit(ui.draft);
  ui.busy = false;
  if (turn.editor !== ui) return; // closed meanwhile (the turn was replaced)
  if (ok) return closeEditor(turn, false);
  for (const button of form.querySelectorAll("button")) button.disabled = false;
  turn.update();
  form.querySelector("textarea").focus();
}

export function editorForm(turn) {
  const ui = turn.editor;
  const id = `edit-${turn.id}`;
  const hint = `${id}-hint`;
  const form = el("form", {
    class: "edit-form",
    "aria-label": "Edit the message",
    onsubmit: (event) => {
      event.preventDefault();
      submit(turn, form);
    },
  });
  const box = el("textarea", {
    id,
    class: "edit-message",
    "data-testid": "edit-message",
    rows: "3",
    required: true,
    "aria-describedby": hint,
    oninput: (event) => { ui.draft = event.target.value; },
    onkeydown: (event) => {
      if (event.key === "Escape") {
        event.preventDefault();
        event.stopPropagation(); // the page's Escape (the menu, the inspector) is not this one
        closeEditor(turn);
      } else if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault(); // as in the composer: Enter sends, Shift+Enter is a new line
        form.requestSubmit();
      }
    },
  });
  box.value = ui.draft;
  form.append(
    el("label", { for: id, class: "visually-hidden", text: "Edited message" }),
    box,
    el("p", {
      id: hint,
      class: "muted edit-hint",
      text: "Sending it answers again from here: this answer and every later one are replaced " +
        "(kept, collapsed), and an email or other write they completed is not done again.",
    }),
    el("div", { class: "edit-actions" },
      el("button", { type: "button", text: "Cancel", onclick: () => closeEditor(turn) }),
      el("button", { type: "submit", class: "primary", "data-testid": "edit-confirm", text: "Send edit" })),
  );
  return form;
}
