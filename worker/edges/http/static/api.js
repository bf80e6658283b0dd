// The API client: JSON requests to the public /v1 routes with the bearer token, asked once per
// tab when the server wants one (401), or carried by the page's URL as `dres up` prints it.
import { $ } from "./dom.js";

const TOKEN_KEY = "dres.token";
const APPROVER_KEY = "dres.approverToken";

// `dres up` prints the page's URL with its token after "#token=" (a fragment: no server is sent
// it). Taken once into this tab's storage and out of the address bar, so that it is neither
// bookmarked nor shared with the URL; the hash is the open conversation's again.
const carried = /^#token=([^&]+)$/.exec(location.hash);
if (carried) {
  sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(carried[1]));
  history.replaceState(null, "", location.pathname + location.search);
}

// An approver's own token (DRES_APPROVER_TOKENS): only it decides approvals, kept for the tab.
export const approverToken = () => sessionStorage.getItem(APPROVER_KEY) || "";
export const keepApproverToken = (token) => sessionStorage.setItem(APPROVER_KEY, token.trim());
// answers that mean "not now": the server or its store (Redis, the broker) is out of reach
export const TRANSIENT = new Set([502, 503, 504]);

export function headers(extra = {}, token = sessionStorage.getItem(TOKEN_KEY)) {
  return token ? { ...extra, Authorization: `Bearer ${token}` } : extra;
}

export function askToken() {
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

// `ask: false`: a 401 is answered as it is, the token is not asked for (a look the person did
// not ask for, such as the list of conversations when the page opens). `token`: sent instead of
// the tab's API token (an approver's, on a decision).
export async function api(method, path, body, { ask = true, token = undefined } = {}) {
  for (;;) {
    const type = body ? { "Content-Type": "application/json" } : {};
    const init = { method, headers: token === undefined ? headers(type) : headers(type, token) };
    if (body) init.body = JSON.stringify(body);
    let response;
    try {
      response = await fetch(path, init);
    } catch {
      return { ok: false, status: 0, data: { detail: "the server cannot be reached" } };
    }
    if (response.status === 401 && ask) {
      await askToken();
      continue;
    }
    const data = response.status === 204 ? {} : await response.json().catch(() => ({}));
    return { ok: response.ok, status: response.status, data };
  }
}

export const turnPath = (turnId, rest = "") => `/v1/turns/${encodeURIComponent(turnId)}${rest}`;
