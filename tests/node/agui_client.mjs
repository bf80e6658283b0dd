// AG-UI's own HttpAgent against a dres api, for tests/api/test_chat_clients.py,
// test_chat_forks.py and test_client_tools_clients.py. Reads one JSON command on stdin, prints one
// JSON result on stdout:
//   {url, threadId, message, model, token?, approve?: boolean, messages?, props?, resume?, tools?,
//    answer?}
//     -> {runs: [{events: [...], outcome, pending}], messages, error}: one run; with `approve` set,
//        a run whose outcome is an interrupt is followed by a second run resuming every interrupt
//        with {approved: approve}. `messages` (instead of `message`): the agent's messages as a
//        page holds them (a re-run, an edit); `props`: more forwardedProps (`regenerate`);
//        `resume`: the first run's resume entries. `tools`: the page's own tools (frontend tools),
//        in every run's input; with `answer` set, a run that finishes leaving tool calls
//        unanswered (`pending`: the calls the agent derives) is followed by a run whose input
//        ends with a `tool` message per call, its content `answer` as JSON. A run that fails (an
//        HTTP error) ends the runs; `error` is what the client threw.
import { HttpAgent } from "@ag-ui/client";

const input = JSON.parse(await new Promise((resolve) => {
  let data = "";
  process.stdin.on("data", (c) => (data += c));
  process.stdin.on("end", () => resolve(data));
}));

const agent = new HttpAgent({
  url: `${input.url}/v1/ag-ui`,
  headers: input.token ? { Authorization: `Bearer ${input.token}` } : {},
  threadId: input.threadId,
  initialMessages: input.messages ?? [{ id: "u1", role: "user", content: input.message }],
});

async function run(params) {
  const events = [];
  let pending = [];
  await agent.runAgent(
    {
      forwardedProps: { model: input.model, ...input.props },
      ...(input.tools ? { tools: input.tools } : {}),
      ...params,
    },
    {
      onEvent: ({ event }) => { events.push(event); },
      onRunFinishedEvent: (finished) => { pending = finished.pendingToolCallIds ?? []; },
    },
  );
  const finished = events.find((e) => e.type === "RUN_FINISHED");
  return { events, outcome: finished?.outcome ?? null, pending };
}

const runs = [];
let error = null;
try {
  runs.push(await run(input.resume ? { resume: input.resume } : {}));
  if (input.approve !== undefined && runs[0].outcome?.type === "interrupt") {
    const resume = runs[0].outcome.interrupts.map((i) => ({
      interruptId: i.id,
      status: "resolved",
      payload: { approved: input.approve },
    }));
    runs.push(await run({ resume }));
  } else if (input.answer !== undefined && runs[0].pending.length > 0) {
    for (const toolCallId of runs[0].pending) {
      const content = JSON.stringify(input.answer);
      agent.addMessage({ id: `answer-${toolCallId}`, role: "tool", toolCallId, content });
    }
    runs.push(await run({}));
  }
} catch (e) {
  error = String(e?.message ?? e);
}
process.stdout.write(JSON.stringify({ runs, messages: agent.messages, error }));
