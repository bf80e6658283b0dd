// dres's page: a chat over the public HTTP API (/v1/...), nothing else. Its modules, each one
// job: api.js (the API client), stream.js (a turn's event stream), turnstate.js (a turn's
// state, a pure fold of its events), turn.js (a turn followed, polled, continued), render.js
// (a turn's timeline and status bar), approvals.js, inspector.js, conversations.js (with
// forks: Regenerate, Edit), editor.js (a user message's inline editor), health.js (the
// no-worker notice). This one wires the page's controls.
import { $ } from "./dom.js";
import { closeMenu, newConversation, send, startConversations } from "./conversations.js";
import { watchWorkers } from "./health.js";
import { closeInspector, inspecting } from "./inspector.js";

const MAX_AUTO = Number(document.querySelector('meta[name="dres-max-auto-continue"]').content) || 0;

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
    } else if (inspecting()) {
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
  startConversations({ maxAuto: MAX_AUTO, autoOn: () => auto.checked });
  watchWorkers();
}

start();
