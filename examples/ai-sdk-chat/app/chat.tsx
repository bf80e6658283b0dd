"use client";

import { useChat } from "@ai-sdk/react";
import {
  DefaultChatTransport,
  getToolName,
  isToolUIPart,
  lastAssistantMessageIsCompleteWithApprovalResponses,
  lastAssistantMessageIsCompleteWithToolCalls,
  type UIMessage,
} from "ai";
import { useEffect, useState } from "react";

const transport = new DefaultChatTransport({ api: "/api/chat" });

// an answer goes back to dres as soon as the page has it: an approval decided, or an output
// for every call of the step that the page runs (ask_user, declared in chat_tools.py)
const answered = (chat: { messages: UIMessage[] }) =>
  lastAssistantMessageIsCompleteWithApprovalResponses(chat) ||
  lastAssistantMessageIsCompleteWithToolCalls(chat);

// The chat `id` (a dres conversation): its history first, then the chat itself.
export function Chat({ id }: { id: string }) {
  const [history, setHistory] = useState<UIMessage[] | null>(null);
  const [problem, setProblem] = useState<string | null>(null);
  useEffect(() => {
    fetch(`/api/chat/${encodeURIComponent(id)}/messages`)
      .then(async (reply) => {
        if (reply.status === 404) return setHistory([]); // a new chat
        if (!reply.ok) throw new Error((await reply.json()).detail ?? reply.statusText);
        setHistory(await reply.json());
      })
      .catch((e) => setProblem(String(e)));
  }, [id]);
  if (problem) return <p role="alert">Could not load the chat: {problem}</p>;
  if (history === null) return <p>Loading…</p>;
  return <Conversation id={id} history={history} />;
}

function Conversation({ id, history }: { id: string; history: UIMessage[] }) {
  const { messages, sendMessage, regenerate, addToolApprovalResponse, addToolOutput, resumeStream, status, error } =
    useChat({
      id,
      messages: history,
      transport,
      sendAutomaticallyWhen: answered,
    });
  // GET /api/chat/{id}/stream: a reload mid-answer follows the live turn, and a waiting turn is
  // replayed. What `resume: true` does, but here the page knows when it is done: an answer or a
  // decision given before would not be sent (the AI SDK sends one by itself only when idle) and
  // the replay's parts would overwrite it.
  const [caughtUp, setCaughtUp] = useState(false);
  useEffect(() => {
    let current = true;
    resumeStream().finally(() => current && setCaughtUp(true));
    return () => {
      current = false;
    };
  }, [resumeStream]);
  const [input, setInput] = useState("");
  const [editing, setEditing] = useState<string | null>(null); // the user message being edited
  const busy = status === "submitted" || status === "streaming";
  const waitAnswers = busy || !caughtUp;
  const last = messages.at(-1);

  return (
    <main style={{ maxWidth: 640, margin: "2rem auto", fontFamily: "sans-serif" }}>
      <a href="/">New chat</a>
      {messages.map((m) => (
        <div key={m.id} data-testid={`message-${m.role}`}>
          <b style={{ marginRight: 8 }}>{m.role}</b>
          {m.role === "user" && !busy && (
            <button
              data-testid="edit"
              onClick={() => {
                setEditing(m.id);
                setInput(m.parts.map((p) => (p.type === "text" ? p.text : "")).join(""));
              }}
            >
              Edit
            </button>
          )}
          {m.parts.map((part, i) => {
            if (part.type === "text") return <p key={i}>{part.text}</p>;
            if (!isToolUIPart(part)) return null;
            return (
              <pre key={i} data-testid="tool" data-state={part.state}>
                {getToolName(part)} {part.state} {JSON.stringify(part.input)}
                {part.state === "output-available" && ` → ${JSON.stringify(part.output)}`}
                {part.state === "output-error" && ` → ${part.errorText}`}
                {part.state === "input-available" && getToolName(part) === "ask_user" && (
                  <Answer
                    disabled={waitAnswers}
                    onAnswer={(answer) =>
                      addToolOutput({ tool: "ask_user", toolCallId: part.toolCallId, output: { answer } })
                    }
                  />
                )}
                {part.state === "approval-requested" && (
                  <>
                    <button
                      disabled={waitAnswers}
                      onClick={() => addToolApprovalResponse({ id: part.approval.id, approved: true })}
                    >
                      Approve
                    </button>
                    <button
                      disabled={waitAnswers}
                      onClick={() => addToolApprovalResponse({ id: part.approval.id, approved: false })}
                    >
                      Deny
                    </button>
                  </>
                )}
              </pre>
            );
          })}
        </div>
      ))}
      {last?.role === "assistant" && !busy && (
        <button data-testid="regenerate" onClick={() => regenerate({ messageId: last.id })}>
          Regenerate
        </button>
      )}
      {error && <p role="alert">{error.message}</p>}
      <form
        onSubmit={(e) => {
          e.preventDefault();
          // an edit keeps the message's id: dres forks the turn that answered it
          sendMessage(editing ? { text: input, messageId: editing } : { text: input });
          setInput("");
          setEditing(null);
        }}
      >
        {editing && <span>Editing a message </span>}
        <input
          data-testid="composer"
          value={input}
          onChange={(e) => setInput(e.target.value)}
          disabled={waitAnswers}
          aria-label="message"
        />
      </form>
    </main>
  );
}

// The person's answer to ask_user: the turn waits for it, and goes on in the same message.
function Answer({ onAnswer, disabled }: { onAnswer: (answer: string) => void; disabled: boolean }) {
  const [answer, setAnswer] = useState("");
  return (
    <form
      onSubmit={(e) => {
        e.preventDefault();
        if (!disabled) onAnswer(answer);
      }}
    >
      <input
        data-testid="tool-answer"
        value={answer}
        onChange={(e) => setAnswer(e.target.value)}
        disabled={disabled}
        aria-label="answer"
      />
      <button type="submit" disabled={disabled}>
        Answer
      </button>
    </form>
  );
}
