// An AG-UI client on dres: `node agent.mjs "your message"`. The thread is a dres conversation;
// a write that needs approval ends the run with an interrupt, and the script's own tool
// (prompt_user, a frontend tool: the model calls it, this script runs it) ends the run with the
// call unanswered. Both are answered here from the terminal, in the next run's input.
import { HttpAgent, randomUUID } from "@ag-ui/client";
import { createInterface } from "node:readline/promises";

const agent = new HttpAgent({
  url: `${process.env.DRES_URL ?? "http://127.0.0.1:8000"}/v1/ag-ui`,
  headers: process.env.DRES_TOKEN ? { Authorization: `Bearer ${process.env.DRES_TOKEN}` } : {},
  initialMessages: [{ id: "m1", role: "user", content: process.argv[2] ?? "What is in the outbox?" }],
});

// sent with every run: dres records the first run's as its turn's client tools
const tools = [{
  name: "prompt_user",
  description: "Ask the person at the terminal a question; returns {answer}",
  parameters: { type: "object", properties: { question: { type: "string" } }, required: ["question"] },
}];

const show = {
  onTextMessageContentEvent: ({ event }) => process.stdout.write(event.delta),
  onTextMessageEndEvent: () => process.stdout.write("\n"),
  onToolCallEndEvent: ({ toolCallName, toolCallArgs }) =>
    console.log(`[${toolCallName} ${JSON.stringify(toolCallArgs)}]`),
  onToolCallResultEvent: ({ event }) => console.log(`[→ ${event.content}]`),
};

// the terminal's lines, one per question (typed, or piped in)
const terminal = createInterface({ input: process.stdin });
const lines = terminal[Symbol.asyncIterator]();
async function ask(question) {
  process.stdout.write(`${question} `);
  return ((await lines.next()).value ?? "").trim();
}

let params = {};
for (;;) {
  let outcome;
  const asked = []; // this run's calls of prompt_user, which the run left for us to answer
  await agent.runAgent({ tools, ...params }, {
    ...show,
    onToolCallEndEvent: (e) => {
      show.onToolCallEndEvent(e);
      if (e.toolCallName === "prompt_user") asked.push({ id: e.event.toolCallId, ...e.toolCallArgs });
    },
    onRunFinishedEvent: ({ event }) => { outcome = event.outcome; },
  });
  const interrupts = outcome?.type === "interrupt" ? outcome.interrupts : [];
  if (asked.length === 0 && interrupts.length === 0) break;
  for (const call of asked) {
    const answer = await ask(call.question);
    // the answer is a tool message for the call: the same turn goes on with it
    agent.addMessage({ id: randomUUID(), role: "tool", toolCallId: call.id, content: JSON.stringify({ answer }) });
  }
  const resume = [];
  for (const interrupt of interrupts) {
    const yes = (await ask(`${interrupt.message}: approve? [y/N]`)) === "y";
    resume.push({ interruptId: interrupt.id, status: "resolved", payload: { approved: yes } });
  }
  params = resume.length > 0 ? { resume } : {};
}
terminal.close();
