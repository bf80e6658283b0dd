"""The providers' wire forms: dres's messages -> each API's request, each stream -> ModelEvents.

Pure translation, no SDK import: ``providers`` hands these the SDK's stream objects.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from worker.base.errors import ModelError
from worker.engine.models.base import (
    AssistantMessage,
    Message,
    ModelEvent,
    RecordedCall,
    TextDelta,
    ToolCall,
    ToolResultMessage,
    ToolSchema,
    Usage,
    UserMessage,
)

# -- requests ------------------------------------------------------------------------------


def anthropic_messages(messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    """Messages API form: tool results are user content; same-role neighbours are merged."""
    out: list[dict[str, Any]] = []
    for m in messages:
        content: list[dict[str, Any]]
        if isinstance(m, UserMessage):
            role, content = "user", [{"type": "text", "text": m.text}] if m.text else []
        elif isinstance(m, AssistantMessage):
            role = "assistant"
            content = [{"type": "text", "text": m.text}] if m.text else []
            content += [
                {"type": "tool_use", "id": _call_id(c, i), "name": c.name, "input": _object(c)}
                for i, c in enumerate(m.tool_calls)
            ]
        else:
            result = {"type": "tool_result", "tool_use_id": m.call_id, "content": m.content}
            role, content = "user", [{**result, "is_error": m.is_error}]
        if not content:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(content)
        else:
            out.append({"role": role, "content": content})
    for message in out:
        # The API wants a user message's tool results before its text.
        message["content"].sort(key=lambda block: block["type"] != "tool_result")
    return out


def openai_messages(system: str, messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    """Chat Completions form: tool calls as functions, each result a ``tool`` message."""
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for m in messages:
        if isinstance(m, UserMessage):
            out.append({"role": "user", "content": m.text})
        elif isinstance(m, AssistantMessage):
            message: dict[str, Any] = {"role": "assistant", "content": m.text or None}
            if m.tool_calls:
                message["tool_calls"] = [
                    {
                        "id": _call_id(c, i),
                        "type": "function",
                        "function": {"name": c.name, "arguments": _arguments(c)},
                    }
                    for i, c in enumerate(m.tool_calls)
                ]
            out.append(message)
        elif isinstance(m, ToolResultMessage):
            # Chat Completions has no error flag on a tool result; say it in the content.
            content = f"Error: {m.content}" if m.is_error else m.content
            out.append({"role": "tool", "tool_call_id": m.call_id, "content": content})
    return out


def anthropic_tools(tools: tuple[ToolSchema, ...]) -> list[dict[str, Any]]:
    return [
        {"name": t.name, "description": t.description, "input_schema": t.input_schema}
        for t in tools
    ]


def openai_tools(tools: tuple[ToolSchema, ...]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": t.name,
                "description": t.description,
                "parameters": t.input_schema,
            },
        }
        for t in tools
    ]


def _call_id(call: RecordedCall, position: int) -> str:
    return call.call_id or f"call_{position}"


def _object(call: RecordedCall) -> Any:
    """Anthropic wants an object; a raw (malformed) input is wrapped so the history still reads."""
    return call.input if isinstance(call.input, dict) else {"value": call.input}


def _arguments(call: RecordedCall) -> str:
    return call.input if isinstance(call.input, str) else json.dumps(call.input, ensure_ascii=False)


# -- responses -----------------------------------------------------------------------------


@dataclass
class _PendingCall:
    provider_id: str | None = None
    name: str = ""
    parts: list[str] = field(default_factory=list)

    def done(self) -> ToolCall:
        return ToolCall(self.name, parse_input("".join(self.parts)), self.provider_id)


def parse_input(text: str) -> Any:
    """A call's JSON input. A truncated or malformed one is passed on as the raw text: the
    executor then records an invalid-input error result the model can read and correct."""
    if not text.strip():
        return {}
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def anthropic_events(stream: Any) -> Iterator[ModelEvent]:
    """Raw Messages stream events -> text deltas, each tool call at its block's stop, and the
    usage at the end: input tokens come on ``message_start``, output tokens (a running count) on
    each ``message_delta``."""
    calls: dict[int, _PendingCall] = {}
    finished = False
    spent: dict[str, int] = {}
    for event in stream:
        if event.type == "message_start":
            _count(spent, getattr(event.message, "usage", None))
        elif event.type == "message_delta":
            _count(spent, getattr(event, "usage", None))
        elif event.type == "content_block_start" and event.content_block.type == "tool_use":
            block = event.content_block
            calls[event.index] = _PendingCall(block.id, block.name)
        elif event.type == "content_block_delta":
            delta = event.delta
            if delta.type == "text_delta" and delta.text:
                yield TextDelta(delta.text)
            elif delta.type == "input_json_delta" and event.index in calls:
                calls[event.index].parts.append(delta.partial_json)
        elif event.type == "content_block_stop" and event.index in calls:
            yield calls.pop(event.index).done()
        elif event.type == "message_stop":
            finished = True
    if not finished:
        raise ModelError("stream_ended", "the response stream ended before message_stop")
    if spent:
        yield Usage(spent.get("input_tokens", 0), spent.get("output_tokens", 0))


def _count(spent: dict[str, int], usage: Any) -> None:
    """Keep the token counts a stream event reports (a later count replaces an earlier one)."""
    for name in ("input_tokens", "output_tokens"):
        value = getattr(usage, name, None)
        if isinstance(value, int) and value > 0:
            spent[name] = value


def openai_events(stream: Any) -> Iterator[ModelEvent]:
    """Completion chunks -> text deltas; tool calls, assembled by index, once the stream ends;
    then the usage, which a stream asked for it (``include_usage``) reports in a last chunk with
    no choices."""
    calls: dict[int, _PendingCall] = {}
    finished = False
    usage: Usage | None = None
    for chunk in stream:
        reported = getattr(chunk, "usage", None)
        if reported is not None:
            usage = Usage(reported.prompt_tokens or 0, reported.completion_tokens or 0)
        for choice in chunk.choices or ():
            delta = choice.delta
            if delta is not None and delta.content:
                yield TextDelta(delta.content)
            for part in (delta.tool_calls if delta is not None else None) or ():
                call = calls.setdefault(part.index, _PendingCall())
                call.provider_id = call.provider_id or part.id
                if part.function is not None:
                    # The name comes whole in a call's first delta; some servers repeat it.
                    call.name = call.name or part.function.name or ""
                    call.parts.append(part.function.arguments or "")
            finished = finished or choice.finish_reason is not None
    if not finished:
        raise ModelError("stream_ended", "the completion stream ended without a finish_reason")
    for index in sorted(calls):
        yield calls[index].done()
    if usage is not None:
        yield usage
