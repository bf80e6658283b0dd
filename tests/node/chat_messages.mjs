// A chat's history as a page loads it (GET /v1/chat/{id}/messages), checked by the AI SDK's own
// validateUIMessages, for tests/api/test_chat_messages.py. Reads one JSON command on stdin,
// prints one JSON result on stdout:
//   {url, chatId, token?} -> {status, messages, error}: the messages as validateUIMessages returns
//   them (null and its error's message when it refuses them; the body when the status is not 200)
import { validateUIMessages } from "ai";

const input = JSON.parse(await new Promise((resolve) => {
  let data = "";
  process.stdin.on("data", (c) => (data += c));
  process.stdin.on("end", () => resolve(data));
}));

const response = await fetch(`${input.url}/v1/chat/${encodeURIComponent(input.chatId)}/messages`, {
  headers: input.token ? { Authorization: `Bearer ${input.token}` } : {},
});
const body = await response.json();
let result;
if (response.status !== 200) {
  result = { status: response.status, messages: null, error: body.detail };
} else {
  try {
    result = { status: 200, messages: await validateUIMessages({ messages: body }), error: null };
  } catch (e) {
    result = { status: 200, messages: null, error: e.message };
  }
}
process.stdout.write(JSON.stringify(result));
