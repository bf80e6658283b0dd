"use client";

import { useChat } from "@ai-sdk/react";
import {
  DefaultChatTransport,
  isToolUIPart,
  lastAssistantMessageIsCompleteWithApprovalResponses,
} from "ai";
import { useState } from "react";

// one conversation per page load; keep the id (say, in the URL) to come back to it
const chatId = globalThis.crypto?.randomUUID?.() ?? "demo";

export default function Chat() {
  const [input, setInput] = useState("");
  const { messages, sendMessage, addToolApprovalResponse, status } = useChat({
    id: chatId,
    transport: new DefaultChatTransport({ api: "/api/chat" }),
    resume: true, // GET /api/chat/{id}/stream: the live turn after a reload
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
  });

  return (
    <main style={{ maxWidth: 640, margin: "2rem auto", fontFamily: "sans-serif" }}>
      {messages.map((m) => (
        <div key={m.id}>
          <b>{m.role}</b>
          {m.parts.map((part, i) => {
            if (part.type === "text") return <p key={i}>{part.text}</p>;
            if (!isToolUIPart(part)) return null;
            return (
              <pre key={i}>
                {part.type} {part.state} {JSON.stringify(part.input)}
                {part.state === "output-available" && ` → ${JSON.stringify(part.output)}`}
                {part.state === "approval-requested" && (
                  <>
                    <button onClick={() => addToolApprovalResponse({ id: part.approval.id, approved: true })}>
                      Approve
                    </button>
                    <button onClick={() => addToolApprovalResponse({ id: part.approval.id, approved: false })}>
                      Deny
                    </button>
                  </>
                )}
              </pre>
            );
          })}
        </div>
      ))}
      <form
        onSubmit={(e) => {
          e.preventDefault();
          sendMessage({ text: input });
          setInput("");
        }}
      >
        <input value={input} onChange={(e) => setInput(e.target.value)} disabled={status !== "ready"} />
      </form>
    </main>
  );
}
