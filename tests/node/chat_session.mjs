// The AI SDK's own Chat (its AbstractChat, the class useChat drives) against a dres api, for
// tests/api/test_chat_forks.py and test_client_tools_clients.py: a page holding `messages` does one
// thing. Reads one JSON command on stdin, prints one JSON result on stdout:
//   {url, chatId, messages, body?, op, answer?}
//   answer {tool, output} | {tool, errorText}  the page runs that client tool: its onToolCall
//                                         answers each call of it with addToolOutput, and
//                                         sendAutomaticallyWhen: lastAssistantMessageIsComplete-
//                                         WithToolCalls sends the answer
//   op {do: "send", text}                 sendMessage({text}): a new user message
//      {do: "edit", messageId, text}      sendMessage({text, messageId}): an edit of that message
//      {do: "regenerate", messageId?}     regenerate({messageId})
//      {do: "approve", approved}          addToolApprovalResponse for each pending request, then
//                                         sendMessage() (as sendAutomaticallyWhen would)
//      {do: "answer", output | errorText} addToolOutput for each call of the last message with no
//                                         output yet (a person answering it), then sendMessage()
//                                         (as sendAutomaticallyWhen would)
//      {do: "submit"}                     sendMessage() with nothing new: the messages as they are
//      {do: "reconnect"}                  resumeStream(): a page reloaded (useChat's `resume`)
//      {do: "resend", request}            a request recorded before, sent again through the same
//                                         transport (a retried request, a second tab)
//   -> {requests: [{status, body | method}], chunks, ends, error, messages}: what was sent and
//      answered, the chunk types read, the chunks that end a message (`message-metadata`,
//      `finish`, `error`, `abort`), the chat's error (an HTTP error's body), the messages the chat
//      holds
import {
  AbstractChat,
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithToolCalls,
  readUIMessageStream,
} from "ai";

const input = JSON.parse(await new Promise((resolve) => {
  let data = "";
  process.stdin.on("data", (c) => (data += c));
  process.stdin.on("end", () => resolve(data));
}));

/** The chat state a UI library keeps (as @ai-sdk/react's), in memory. */
class State {
  constructor(messages) {
    this.status = "ready";
    this.error = undefined;
    this.messages = messages;
  }
  pushMessage = (message) => { this.messages = this.messages.concat(message); };
  popMessage = () => { this.messages = this.messages.slice(0, -1); };
  replaceMessage = (index, message) => {
    this.messages = [
      ...this.messages.slice(0, index),
      this.snapshot(message),
      ...this.messages.slice(index + 1),
    ];
  };
  snapshot = (thing) => structuredClone(thing);
}

class Chat extends AbstractChat {
  constructor({ messages, ...init }) {
    super({ ...init, state: new State(messages) });
  }
}

const requests = [];
const chunks = [];
const ends = [];
const ENDS = new Set(["message-metadata", "finish", "error", "abort"]);

class RecordingTransport extends DefaultChatTransport {
  processResponseStream(stream) {
    return super.processResponseStream(stream).pipeThrough(new TransformStream({
      transform(chunk, controller) {
        chunks.push(chunk.type);
        if (ENDS.has(chunk.type)) ends.push(chunk);
        controller.enqueue(chunk);
      },
    }));
  }
}

const transport = new RecordingTransport({
  api: `${input.url}/v1/chat`,
  body: input.body ?? {},
  fetch: async (url, init) => {
    const response = await fetch(url, init);
    requests.push({
      status: response.status,
      ...(init.method === "POST" ? { body: JSON.parse(init.body) } : { method: init.method }),
    });
    return response;
  },
});
// the page's own tool, as the AI SDK's docs run one: answered in onToolCall, not awaited there
const answer = input.answer;
const runsTool = answer && {
  onToolCall: ({ toolCall }) => {
    if (toolCall.toolName !== answer.tool) return;
    const { toolCallId } = toolCall;
    chat.addToolOutput(answer.errorText === undefined
      ? { tool: answer.tool, toolCallId, output: answer.output }
      : { tool: answer.tool, toolCallId, state: "output-error", errorText: answer.errorText });
  },
  sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithToolCalls,
};
const chat = new Chat({ id: input.chatId, messages: input.messages ?? [], transport, ...runsTool });

const op = input.op;
let error = null;
if (op.do === "send") {
  await chat.sendMessage({ text: op.text });
} else if (op.do === "edit") {
  await chat.sendMessage({ text: op.text, messageId: op.messageId });
} else if (op.do === "regenerate") {
  await chat.regenerate({ messageId: op.messageId });
} else if (op.do === "approve") {
  const pending = chat.messages.flatMap((m) => m.parts)
    .filter((p) => p.state === "approval-requested");
  for (const part of pending) {
    await chat.addToolApprovalResponse({ id: part.approval.id, approved: op.approved });
  }
  await chat.sendMessage();
} else if (op.do === "answer") {
  const open = chat.lastMessage.parts.filter((p) => p.state === "input-available");
  for (const part of open) {
    await chat.addToolOutput(op.errorText === undefined
      ? { toolCallId: part.toolCallId, output: op.output }
      : { toolCallId: part.toolCallId, state: "output-error", errorText: op.errorText });
  }
  await chat.sendMessage();
} else if (op.do === "submit") {
  await chat.sendMessage();
} else if (op.do === "reconnect") {
  await chat.resumeStream();
} else if (op.do === "resend") {
  const { id, messages, trigger, messageId, ...body } = op.request;
  const last = messages.at(-1);
  try {
    const stream = await transport.sendMessages({
      chatId: id, messages, trigger, messageId, body, abortSignal: undefined,
    });
    // a stream that answers an approval goes on with the assistant message the request holds
    const held = last?.role === "assistant" ? last : undefined;
    let message = null;
    for await (const m of readUIMessageStream({ stream, message: held })) message = m;
    chat.messages = [...messages.filter((m) => m.id !== message?.id), message];
  } catch (e) {
    error = e.message;
  }
} else {
  throw new Error(`unknown op ${op.do}`);
}
error ??= chat.error?.message ?? null;
process.stdout.write(JSON.stringify({ requests, chunks, ends, error, messages: chat.messages }));
