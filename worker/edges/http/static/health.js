// Whether any worker is alive (`GET /healthz`'s `workers`, the workers seen in the last 30 s):
// the `no-worker` notice, shown while there is none, says how to start one, since a message sent
// meanwhile waits, queued. Looked at when the page opens, then every 5 s while the notice shows
// and every 30 s while it does not, only while the tab is visible (and at once when it is again).
import { $ } from "./dom.js";

const SHOWN_MS = 5_000;
const HIDDEN_MS = 30_000;

async function look() {
  let workers;
  try {
    const response = await fetch("/healthz", { cache: "no-store" });
    ({ workers } = await response.json());
  } catch {
    return; // the server out of reach: the notice stays as it was (the page says so elsewhere)
  }
  // a 503 without `workers` (the ledger's Redis unreachable) tells nothing about the workers
  if (typeof workers === "number") $("no-worker").hidden = workers > 0;
}

export function watchWorkers() {
  let timer;
  const tick = async () => {
    clearTimeout(timer);
    if (document.visibilityState === "visible") await look();
    timer = setTimeout(tick, $("no-worker").hidden ? HIDDEN_MS : SHOWN_MS);
  };
  document.addEventListener("visibilitychange", () => {
    if (document.visibilityState === "visible") tick();
  });
  tick();
}
