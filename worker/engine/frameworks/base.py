"""What a framework adapter is, and what dres hands a framework's run (docs/loops.md).

An adapter wraps one agent of one framework. Its ``run`` drives the framework to the end of the
turn from a history dres rebuilt from the ledger, and calls ``Hooks`` at the framework's own
extension points: before and after every model call (``model_start``/``model_done``), with every
text delta (``text``), and for every tool call (``tool``), which dres's executor decides, records
and — when it runs — lets the framework run (``invoke``) inside the framework's own task.

Hooks run on the event loop; what they ask of dres is done in the chunk's thread. A hook may raise
``Halt`` (a ``BaseException``, so no framework's ``except Exception`` keeps it): dres has ended
the run (Stop, a budget, a wait for a person) and the framework must unwind. Adapters let it pass.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from worker.engine.models.base import Message

#: the attribute ``worker.tools.read_only`` sets on a function
READ_ONLY_ATTR = "__dres_read_only__"


def read_only(fn: Any) -> Any:
    """Mark ``fn`` as a read-only tool of a framework's agent (docs/loops.md) and return it, so
    it goes before or after the framework's own decorator. Any other tool is a write."""
    try:
        setattr(fn, READ_ONLY_ATTR, True)
    except (AttributeError, TypeError):  # a tool object that takes no attributes
        object.__setattr__(fn, READ_ONLY_ATTR, True)
    return fn


def marked_read_only(*candidates: Any, metadata: Any = None) -> bool:
    """Whether a framework tool is read-only: one of its objects (the function, the tool)
    carries ``read_only``'s mark, or its metadata says ``{"read_only": true}``."""
    if isinstance(metadata, dict) and metadata.get("read_only") is True:
        return True
    return any(getattr(c, READ_ONLY_ATTR, False) is True for c in candidates if c is not None)


class Halt(BaseException):
    """dres ended the framework's run (Stop, a budget, the model-call limit, a wait): unwind."""


@dataclass(frozen=True)
class ToolAnswer:
    """What the framework hands its model as a call's result: the call's result as dres recorded
    it (the tool's, a layer-2 block's recorded one, an error result naming what was wrong)."""

    result: Any
    is_error: bool = False


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0


@dataclass(frozen=True)
class FrameworkTool:
    """One tool of the agent, as dres's executor sees it."""

    name: str
    description: str
    #: the tool's input JSON schema, as the framework shows it to the model
    schema: dict[str, Any]
    read_only: bool = False
    #: the framework's own approval flag: True, or a callable ``(input) -> bool`` (sync; an
    #: adapter runs a framework's async one on the loop)
    needs_approval: bool | Callable[[Any], bool] = False


class Hooks(Protocol):
    """What dres does at a framework's extension points. All but ``text`` wait for dres."""

    async def model_start(self) -> None:
        """Before a model call: raises ``Halt`` when the run must not make it (Stop, a budget,
        the model-call limit)."""

    def text(self, delta: str) -> None:
        """A text delta the model streamed (kept in order; returns at once)."""

    async def model_done(self, tool_calls: int, usage: Usage | None) -> None:
        """After a model call: how many (non-output) tool calls it made, its usage."""

    async def tool(
        self, name: str, arguments: Any, invoke: Callable[[], Awaitable[Any]]
    ) -> ToolAnswer:
        """A tool call: dres decides it (both layers, the guard, approvals), records it and,
        when it runs, awaits ``invoke()`` (the framework's own call) in the caller's task.
        ``arguments``: the call's input as JSON values. Raises ``Halt`` when the run ends here
        (the call waits for a person, Stop)."""


class Adapter(ABC):
    """One framework agent, loaded once per process."""

    #: ``pydantic_ai`` or ``openai_agents``
    framework: str
    #: the model's name, for traces and metrics
    model_name: str

    @abstractmethod
    def tools(self) -> Sequence[FrameworkTool]:
        """The agent's tools, for dres's executor (listed once: a framework's dynamic toolsets
        are listed at load)."""

    @abstractmethod
    async def run(self, history: Sequence[Message], hooks: Hooks) -> None:
        """Run the agent to the end of the turn from ``history`` (the turn's conversation as
        dres rebuilt it from the ledger: earlier turns, the user's message, each model response
        and call result, the resume nudge and note as user messages). Raise
        ``worker.base.errors.ModelError`` (a code the loop acts on) for a failed model call."""

    @abstractmethod
    async def call_alone(self, name: str, arguments: Any, call_id: str) -> Any:
        """Run one tool outside a framework run (a call a person approved, run before the next
        run starts): its result, or raise what it raised."""


__all__ = [
    "READ_ONLY_ATTR",
    "Adapter",
    "FrameworkTool",
    "Halt",
    "Hooks",
    "ToolAnswer",
    "Usage",
    "marked_read_only",
    "read_only",
]
