"""The streaming model protocol: provider-neutral messages in, text deltas and tool calls out."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class ToolCall:
    """A tool call as the model streamed it, before the ledger has an id for it."""

    name: str
    input: Any
    #: the provider's id for the call, if it gave one
    provider_id: str | None = None


@dataclass(frozen=True)
class RecordedCall:
    """A tool call in the conversation, as the ledger recorded it.

    The conversation is rebuilt from the ledger, which knows a call by its own id only: a
    request names the call, and its result (``ToolResultMessage.call_id``), by that id.
    """

    name: str
    input: Any
    call_id: str


@dataclass(frozen=True)
class UserMessage:
    text: str


@dataclass(frozen=True)
class AssistantMessage:
    text: str
    #: calls the model made, in the order it made them
    tool_calls: tuple[RecordedCall, ...] = ()


@dataclass(frozen=True)
class ToolResultMessage:
    call_id: str
    tool: str
    #: the result as text (JSON for structured results)
    content: str
    is_error: bool = False


Message = UserMessage | AssistantMessage | ToolResultMessage


@dataclass(frozen=True)
class ToolSchema:
    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class Usage:
    """Tokens the call spent, as the provider reported them (at most one per call, at its end)."""

    input_tokens: int = 0
    output_tokens: int = 0


ModelEvent = TextDelta | ToolCall | Usage


@dataclass(frozen=True)
class ModelRequest:
    system: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSchema, ...] = ()
    #: completed model calls of the turn before this one
    step: int = 0
    #: completed model calls since the turn last resumed
    resume_step: int = 0
    #: (step, resume_step) of every earlier attempted model call of the turn, from the ledger
    prior_attempts: frozenset[tuple[int, int]] = field(default_factory=frozenset)


class ChatModel(Protocol):
    """A streaming chat model. Failures raise ``worker.base.errors.ModelError`` with a code."""

    name: str

    def stream(self, request: ModelRequest) -> Iterator[ModelEvent]: ...
