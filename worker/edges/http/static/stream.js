// A turn's event stream: Server-Sent Events from GET /v1/turns/{id}/events, resumed with
// Last-Event-ID after a drop, and the back-off while the server or its store is out of reach.
import { TRANSIENT, askToken, headers, turnPath } from "./api.js";
import { sleep } from "./dom.js";

// ms before a turn's stream is tried again while out of reach: the first, doubling up to the
// last, or longer when the server's Retry-After says so
const RETRY_MS = [500, 10000];
// ms out of reach in a row after which the page stops following a turn (a reload tries again)
export const GIVE_UP_MS = 10 * 60 * 1000;

// One SSE message block: its id and its JSON data, or null (a comment, a keep-alive).
export function parseBlock(block) {
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
  if (!id || !data.length) return null;
  try {
    return { id, event: JSON.parse(data.join("\n")) };
  } catch (error) {
    console.warn("skipped a malformed event", id, error);
    return null;
  }
}

// Read the turn's events after `lastId` until the server closes the stream (after turn_ended)
// or the connection drops. What came of it: {reached: true} (the stream was opened), or
// {transient: why, retryAfter} (try again later), or {fatal: why}.
export async function readEvents(turnId, lastId, onEvent) {
  const extra = lastId === "0-0" ? {} : { "Last-Event-ID": lastId };
  let response;
  try {
    response = await fetch(turnPath(turnId, "/events"), { headers: headers(extra) });
  } catch {
    return { transient: "the server cannot be reached" };
  }
  if (response.status === 401) {
    await askToken();
    return { reached: false };
  }
  if (!response.ok) {
    const data = await response.json().catch(() => ({}));
    const why = data.detail || `HTTP ${response.status}`;
    if (TRANSIENT.has(response.status)) return { transient: why, retryAfter: response.headers.get("Retry-After") };
    return { fatal: why };
  }
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value.replaceAll("\r\n", "\n");
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const message = parseBlock(buffer.slice(0, end));
        buffer = buffer.slice(end + 2);
        if (message) onEvent(message.id, message.event);
      }
    }
  } catch {
    // a dropped connection: the caller reconnects with Last-Event-ID
  }
  return { reached: true };
}

// Waits between attempts while the events are out of reach: longer each time; gives up after
// GIVE_UP_MS in a row.
export class Backoff {
  constructor() {
    this.reset();
  }

  reset() {
    this.failures = 0;
    this.failingSince = null;
  }

  // false: out of reach too long, give up
  async wait(retryAfter) {
    const now = Date.now();
    this.failingSince ??= now;
    if (now - this.failingSince > GIVE_UP_MS) return false;
    const wait = Math.min(RETRY_MS[1], RETRY_MS[0] * 2 ** this.failures);
    this.failures += 1;
    await sleep(Math.max(wait, (Number(retryAfter) || 0) * 1000));
    return true;
  }
}
