// The AI SDK's own chat client against a dres api, for tests/api/test_chat_clients.py.
// Reads one JSON command on stdin, prints one JSON result on stdout:
//   {op: "send", url, chatId, messages, body?, token?, cutAfterChars?}
//     -> {message, chunks, ends}: the assistant message readUIMessageStream folded (its
//        `metadata` included), the chunk types, and the chunks that end a message whole
//        (`message-metadata`, `finish`, `error`, `abort`)
//        (with cutAfterChars: the request is aborted once that much text has arrived)
//   {op: "reconnect", url, chatId, token?} -> {message: null} when there is no stream (204)
import { DefaultChatTransport, readUIMessageStream } from "ai";

const input = JSON.parse(await new Promise((resolve) => {
  let data = "";
  process.stdin.on("data", (c) => (data += c));
  process.stdin.on("end", () => resolve(data));
}));

const transport = new DefaultChatTransport({
  api: `${input.url}/v1/chat`,
  headers: input.token ? { Authorization: `Bearer ${input.token}` } : {},
  body: input.body ?? {},
});

const textOf = (message) =>
  message.parts.filter((p) => p.type === "text").map((p) => p.text).join("");

const ENDS = new Set(["message-metadata", "finish", "error", "abort"]);

async function fold(stream, abort) {
  const chunks = [];
  const ends = [];
  const seen = stream.pipeThrough(new TransformStream({
    transform(chunk, controller) {
      chunks.push(chunk.type);
      if (ENDS.has(chunk.type)) ends.push(chunk);
      controller.enqueue(chunk);
    },
  }));
  let message = null;
  try {
    // a stream that answers an approval goes on with the assistant message the client holds
    const last = input.messages?.at(-1);
    const held = last?.role === "assistant" ? last : undefined;
    for await (const m of readUIMessageStream({ stream: seen, message: held })) {
      message = m;
      if (abort && input.cutAfterChars && textOf(m).length >= input.cutAfterChars) {
        abort.abort();
        break;
      }
    }
  } catch (e) {
    if (!abort?.signal.aborted) throw e;
  }
  return { message, chunks, ends };
}

let result;
if (input.op === "send") {
  const abort = new AbortController();
  const stream = await transport.sendMessages({
    trigger: "submit-message",
    chatId: input.chatId,
    messageId: undefined,
    messages: input.messages,
    abortSignal: abort.signal,
  });
  result = await fold(stream, abort);
} else {
  const stream = await transport.reconnectToStream({ chatId: input.chatId });
  result = stream === null ? { message: null, chunks: [], ends: [] } : await fold(stream, null);
}
process.stdout.write(JSON.stringify(result));
