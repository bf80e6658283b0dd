// An AG-UI client on dres: `node agent.mjs "your message"`. The thread is a dres conversation;
// a write that needs approval ends the run with an interrupt, answered here from the terminal.
import { HttpAgent } from "@ag-ui/client";
import { createInterface } from "node:readline/promises";

const agent = new HttpAgent({
  url: `${process.env.DRES_URL ?? "http://127.0.0.1:8000"}/v1/ag-ui`,
  headers: process.env.DRES_TOKEN ? { Authorization: `Bearer ${process.env.DRES_TOKEN}` } : {},
  initialMessages: [{ id: "m1", role: "user", content: process.argv[2] ?? "What is in the outbox?" }],
});

const show = {
  onTextMessageContentEvent: ({ event }) => process.stdout.write(event.delta),
  onTextMessageEndEvent: () => process.stdout.write("\n"),
  onToolCallEndEvent: ({ toolCallName, toolCallArgs }) =>
    console.log(`[${toolCallName} ${JSON.stringify(toolCallArgs)}]`),
  onToolCallResultEvent: ({ event }) => console.log(`[→ ${event.content}]`),
};

let params = {};
for (;;) {
  let outcome;
  await agent.runAgent(params, { ...show, onRunFinishedEvent: ({ event }) => { outcome = event.outcome; } });
  if (outcome?.type !== "interrupt") break;
  const terminal = createInterface({ input: process.stdin, output: process.stdout });
  const resume = [];
  for (const interrupt of outcome.interrupts) {
    const yes = (await terminal.question(`${interrupt.message}: approve? [y/N] `)).trim() === "y";
    resume.push({ interruptId: interrupt.id, status: "resolved", payload: { approved: yes } });
  }
  terminal.close();
  params = { resume };
}
