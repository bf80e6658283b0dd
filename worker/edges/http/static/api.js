// The API client: JSON requests to the public /v1 routes with the bearer token, asked once per
// tab when the server wants one (401).
import { $ } from "./dom.js";

const TOKEN_KEY = "dres.token";
// answers that mean "not now": the server or its store (Redis, the broker) is out of reach
export const TRANSIENT = new Set([502, 503, 504]);

export function headers(extra = {}) {
  const token = sessionStorage.getItem(TOKEN_KEY);
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
// not ask for, such as the list of conversations when the page opens)
export async function api(method, path, body, { ask = true } = {}) {
  for (;;) {
    const init = { method, headers: headers(body ? { "Content-Type": "application/json" } : {}) };
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
