"""A framework run in place of dres's own model -> tools steps (docs/loops.md).

``FrameworkSteps`` is what ``AgentLoop`` runs for a turn whose loop names a framework. The run
reads its turn, settles decided approvals and records a resume exactly as dres's own loop does;
then, instead of asking its own model, it starts the framework's agent on the conversation it
rebuilt from the ledger (``Conversation.messages()``: earlier turns, the user's message, every
model response and call result, the resume's nudge and note) and serves the agent's hooks:

- ``model_start``: the safe point of dres's own loop — Stop, ``DRES_MAX_MODEL_CALLS``,
  ``DRES_TURN_TOKEN_BUDGET`` — then ``model_start`` recorded and the call's ``chat`` span opened;
- ``text``: streamed as dres streams its own model's text (the Stop poll between deltas);
- ``model_done``: recorded with the call's usage, the span closed;
- ``tool``: dres's executor decides the call (unknown, invalid, layer 2, the guard, approvals)
  and records it; a call that runs is run by the framework, in its own task, while the chunk
  waits inside the executor's guard — so a soft limit never lands between the effect and its
  record. The framework gets the recorded result.

A model error the framework raises (mapped by its adapter to a ``ModelError``) resumes in the
same run as dres's own loop does: the nudge and note recorded, the conversation rebuilt, the
framework started again. The turn's tools are the agent's own (``FrameworkTool``s as
``ToolSpec``s); dres's registry serves its own loop only.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import structlog

from ledger.cache import F
from ledger.events import Event, ModelDone, ModelStart, TokenUsage
from ledger.usage import UsageFold
from worker.base import metrics
from worker.base.clock import Clock
from worker.base.errors import ModelError, OutcomeUnknown, TurnCancelled, Unconfirmed
from worker.base.settings import Settings
from worker.base.tracing import ChatSpan, Tracer
from worker.engine.frameworks.base import Adapter, FrameworkTool, Halt, ToolAnswer, Usage
from worker.engine.frameworks.bridge import DONE, Ask, Bridge, run_on_loop
from worker.engine.history import Conversation
from worker.engine.models.base import ToolCall
from worker.engine.outcome import RunResult, Waits, waiting_on
from worker.engine.reading import READ_ERRORS
from worker.engine.recorder import Recorder
from worker.engine.tools.calls import Attempt
from worker.engine.tools.context import ToolContext
from worker.engine.tools.executor import ToolExecutor
from worker.engine.tools.registry import Registry
from worker.engine.tools.spec import ToolSpec
from worker.engine.tools.timers import pending_wake


class Loop(Protocol):
    """What a framework's run shares with dres's own loop (``worker.engine.loop.AgentLoop``)."""

    settings: Settings
    clock: Clock
    tracer: Tracer

    def is_cancelled(self, turn_id: str) -> bool: ...
    def stop_polled(self, turn_id: str) -> bool: ...
    def after_model_error(
        self, recorder: Recorder, error: ModelError, transport_resumes: int
    ) -> RunResult | None: ...
    def after_transport_error(
        self, recorder: Recorder, detail: str, transport_resumes: int
    ) -> RunResult | None: ...
    def fresh_attempt(self, recorder: Recorder) -> Attempt: ...
    def fold_conversation(self, turn_id: str, events: list[Event]) -> Conversation: ...
    def fold(self, turn_id: str, events: list[Event], kind: Callable[[], F]) -> F: ...
    def end(
        self, recorder: Recorder, run_reason: str, status: str, code: str = "", detail: str = ""
    ) -> RunResult: ...


log = structlog.get_logger("dres.frameworks")


# -- what the framework's coroutine asks (through ``Hooks``) ----------------------------------


@dataclass(frozen=True)
class ModelStarting:
    pass


@dataclass(frozen=True)
class TextOp:
    delta: str


@dataclass(frozen=True)
class ModelEnded:
    tool_calls: int
    usage: Usage | None


@dataclass(frozen=True)
class ToolOp:
    name: str
    arguments: Any


@dataclass(frozen=True)
class Invoked:
    """The framework's own call ran: its result, or what it raised."""

    value: Any = None
    error: BaseException | None = None


class RunIt:
    """The executor runs the call: the framework runs it now, in its own task."""


RUN_IT = RunIt()


class BridgeHooks:
    """``Hooks`` on the loop: every hook a question (or a post) to the chunk's thread."""

    def __init__(self, bridge: Bridge) -> None:
        self.bridge = bridge

    async def model_start(self) -> None:
        await self.bridge.ask(ModelStarting())

    def text(self, delta: str) -> None:
        if delta:
            self.bridge.post(TextOp(delta))

    async def model_done(self, tool_calls: int, usage: Usage | None) -> None:
        # told, not asked: the framework goes on with the response while the chunk records it
        # (in order: anything the framework asks next is served after it)
        self.bridge.post(ModelEnded(tool_calls, usage))

    async def tool(self, name: str, arguments: Any, invoke: Callable[[], Any]) -> ToolAnswer:
        answer = await self.bridge.ask(ToolOp(name, arguments))
        if isinstance(answer, RunIt):
            try:
                value = await invoke()
            except Exception as e:  # the tool's failure: dres records it as an error result
                answer = await self.bridge.ask(Invoked(error=e))
            else:
                answer = await self.bridge.ask(Invoked(value=value))
        assert isinstance(answer, ToolAnswer)
        return answer


# -- the turn's tools ----------------------------------------------------------------------


class FrameworkTools:
    """The agent's tools as the executor's ``ToolSpec``s: a spec's function lets the framework
    run the call the executor is deciding for the calling thread's run (``live``), or, outside
    a framework run (an approved call settled before it starts), runs the tool alone.

    One per adapter and process (``of``): the specs, and what they build once (the input
    schema's checker), serve every run; what is a run's own is the calling thread's (a
    greenlet's under ``-P gevent``, where ``threading.local`` is patched)."""

    _of: ClassVar[dict[int, tuple[Adapter, FrameworkTools]]] = {}
    _lock: ClassVar[threading.Lock] = threading.Lock()

    @classmethod
    def of(cls, adapter: Adapter) -> FrameworkTools:
        with cls._lock:
            kept = cls._of.get(id(adapter))
            if kept is None or kept[0] is not adapter:
                kept = cls._of[id(adapter)] = (adapter, cls(adapter))
            return kept[1]

    def __init__(self, adapter: Adapter) -> None:
        self.adapter = adapter
        self._run = threading.local()
        specs = [self._spec(t) for t in adapter.tools()]
        self.registry = Registry({s.name: s for s in specs})

    @property
    def live(self) -> tuple[Bridge, Ask, Callable[[], float]] | None:
        """The framework's question the executor is deciding now, with the bridge serving it."""
        live: tuple[Bridge, Ask, Callable[[], float]] | None = getattr(self._run, "live", None)
        return live

    @live.setter
    def live(self, value: tuple[Bridge, Ask, Callable[[], float]] | None) -> None:
        self._run.live = value

    @property
    def answering(self) -> Ask | None:
        """The question to answer with the call's result (the ``Invoked`` one once it ran)."""
        answering: Ask | None = getattr(self._run, "answering", None)
        return answering

    @answering.setter
    def answering(self, value: Ask | None) -> None:
        self._run.answering = value

    def _spec(self, tool: FrameworkTool) -> ToolSpec:
        name = tool.name

        def call(arguments: Any, ctx: ToolContext) -> Any:
            return self._call(name, arguments, ctx)

        needs = tool.needs_approval
        rule: Any = needs
        if callable(needs):
            rule = lambda data, _ctx, _needs=needs: _needs(data)  # noqa: E731
        return ToolSpec(
            name=name,
            fn=call,
            description=tool.description,
            read_only=tool.read_only,
            needs_approval=rule,
            json_schema=tool.schema,
            source=self.adapter.framework,
        )

    def _call(self, name: str, arguments: Any, ctx: ToolContext) -> Any:
        live, self.live = self.live, None
        if live is None:
            return run_on_loop(self.adapter.call_alone(name, arguments, ctx.call_id))
        bridge, ask, poll = live
        bridge.forget(ask)
        ask.answer(RUN_IT)
        while True:
            item = bridge.next(poll(), lambda: None)
            if isinstance(item, Ask) and isinstance(item.op, Invoked):
                self.answering = item
                if item.op.error is not None:
                    raise item.op.error
                return item.op.value
            if item is DONE:  # the framework ended without running the call
                bridge.put_back(item)
                raise RuntimeError(f"the framework did not run {name!r}")
            bridge.put_back(item)


# -- the run -------------------------------------------------------------------------------


class Ended(Exception):
    def __init__(self, result: RunResult) -> None:
        super().__init__(result.detail)
        self.result = result


class FrameworkSteps:
    """One chunk's framework run (see the module's docstring)."""

    def __init__(
        self,
        loop: Loop,
        adapter: Adapter,
        tools: FrameworkTools,
        recorder: Recorder,
        executor: ToolExecutor,
        attempt: Attempt,
    ) -> None:
        self.loop = loop
        self.adapter = adapter
        self.tools = tools
        self.recorder = recorder
        self.executor = executor
        self.attempt = attempt
        self.settings = loop.settings
        self.run_ctx = recorder.run
        self.first = True
        self.step = 0
        self.resume_step = 0
        self.spans = ExitStack()
        self.span: ChatSpan | None = None
        self.checked = loop.clock.now()

    def run(self) -> RunResult:
        transport_resumes = 0
        while True:
            try:
                return self._once()
            except ModelError as e:
                ended = self.loop.after_model_error(self.recorder, e, transport_resumes)
            except (Unconfirmed, OutcomeUnknown) as e:
                ended = self.loop.after_transport_error(self.recorder, str(e), transport_resumes)
            if ended is not None:
                return ended
            transport_resumes += 1
            self.attempt = self.loop.fresh_attempt(self.recorder)

    def _once(self) -> RunResult:
        turn_id = self.run_ctx.turn_id
        conversation = self.loop.fold_conversation(turn_id, self.recorder.events)
        self.step, self.resume_step = conversation.step, conversation.resume_step
        history = conversation.messages()
        # the run's safe point is the framework's first model call (``_model_start``)
        bridge = Bridge()
        hooks = BridgeHooks(bridge)
        bridge.start(lambda: self.adapter.run(tuple(history), hooks))
        try:
            return self._serve(bridge)
        except Ended as e:
            return e.result
        except BaseException:
            self._write_held_model_done()
            raise
        finally:
            bridge.abandon()
            self.spans.close()
            self.span = None

    def _write_held_model_done(self) -> None:
        """A run cut (an interrupt, a failure) while a call's ``model_done`` waits to be written
        with its ``tool_start``: it is written now, as the run's streamed text is."""
        if not any(isinstance(e, ModelDone) for e in self.recorder.held):
            return
        try:
            self.recorder.flush()
        except READ_ERRORS as e:
            log.warning("a model call's model_done could not be written", error=repr(e))

    def _serve(self, bridge: Bridge) -> RunResult:
        poll = self.settings.cancel_poll_s
        while True:
            item = bridge.next(poll, self._poll_stop)
            if item is DONE:
                return self._finished(bridge)
            if isinstance(item, TextOp):
                self._text(item.delta)
                continue
            if isinstance(item, ModelEnded):
                self._model_done(item.tool_calls, item.usage)
                continue
            assert isinstance(item, Ask)
            try:
                item.answer(self._serve_ask(bridge, item))
            finally:
                bridge.forget(item)
                if self.tools.answering is not None:
                    bridge.forget(self.tools.answering)

    def _serve_ask(self, bridge: Bridge, ask: Ask) -> Any:
        op = ask.op
        if isinstance(op, ModelStarting):
            self._model_start()
            return None
        if isinstance(op, ToolOp):
            return self._tool(bridge, ask, op)
        raise TypeError(f"a framework asked what dres does not serve: {op!r}")

    # -- hooks ----------------------------------------------------------------------------------

    def _model_start(self) -> None:
        run, loop = self.run_ctx, self.loop
        first, self.first = self.first, False
        if run.stop_requested if first else loop.is_cancelled(run.turn_id):
            self._end("stopped", "stopped", "cancelled", "Stop requested")
        wake_at = pending_wake(self.recorder.events, loop.clock.now())
        if wake_at:  # a tool of the step returned ``wait_until``: the turn waits, held by none
            raise Ended(waiting_on(Waits(wake_at=wake_at), self.recorder.take_unwritten()))
        if self.step >= self.settings.max_model_calls:
            self._end(
                "error", "stopped", "loop_limit", f"{self.step} model calls without finishing"
            )
        budget = self.settings.turn_token_budget
        over = budget and loop.fold(run.turn_id, self.recorder.events, UsageFold).over(budget)
        if over:
            self._end("stopped", "stopped", "budget", over)
        self.recorder.record(ModelStart, step=self.step, resume_step=self.resume_step)
        self.span = self.spans.enter_context(loop.tracer.chat(self.adapter.model_name))

    def _text(self, delta: str) -> None:
        self.recorder.stream_text(delta)
        now = self.loop.clock.now()
        if now - self.checked >= self.settings.cancel_poll_s:
            self.checked = now
            if self.loop.stop_polled(self.run_ctx.turn_id):
                raise TurnCancelled("Stop requested")

    def _poll_stop(self) -> None:
        if self.loop.stop_polled(self.run_ctx.turn_id):
            raise TurnCancelled("Stop requested")

    def _model_done(self, tool_calls: int, usage: Usage | None) -> None:
        used = None
        if usage is not None:
            used = TokenUsage(input_tokens=usage.input_tokens, output_tokens=usage.output_tokens)
        if tool_calls and not self.recorder.buffered_chars:
            # written with the call's tool_start, one round trip for both (its text, were any
            # still buffered, must go first: then it is written now)
            self.recorder.hold(ModelDone, tool_calls=tool_calls, usage=used)
        else:
            self.recorder.record(ModelDone, tool_calls=tool_calls, usage=used)
        if used is not None:
            metrics.tokens_spent(self.adapter.model_name, used.input_tokens, used.output_tokens)
        if self.span is not None:
            self.span.answered(used, "tool_calls" if tool_calls else "stop")
        self.spans.close()
        self.spans = ExitStack()
        self.span = None
        self.step += 1
        self.resume_step += 1

    def _tool(self, bridge: Bridge, ask: Ask, op: ToolOp) -> Any:
        # No Stop read of its own here: a write's tool_start is recorded only while Stop is not
        # requested (the executor's atomic check), and the next model call reads it.
        self.tools.live = (bridge, ask, lambda: self.settings.cancel_poll_s)
        self.tools.answering = None
        try:
            outcome = self.executor.execute(self.attempt, ToolCall(op.name, op.arguments))
        finally:
            self.tools.live = None
        answering = self.tools.answering or ask
        self.tools.answering = None
        if outcome.request is not None or outcome.awaited:
            # the call waits for a person (or a client): the run ends waiting, the framework
            # unwinds, and the next run rebuilds it from the ledger once it is decided
            waits = Waits()
            if outcome.request is not None:
                waits.requests.append(outcome.request)
            if outcome.awaited:
                waits.calls.append((outcome.call_id, outcome.tool))
            answering.fail(Halt())
            raise Ended(waiting_on(waits, self.recorder.take_unwritten()))
        answer = ToolAnswer(outcome.result, outcome.is_error)
        if answering is not ask:
            answering.answer(answer)
            return None  # the framework waits on ``answering``; ``ask`` was answered RUN_IT
        return answer

    # -- ending ---------------------------------------------------------------------------------

    def _finished(self, bridge: Bridge) -> RunResult:
        try:
            bridge.outcome()
        except Halt:
            # dres halted it, then ended the run itself: nothing else to say
            return self.loop.end(self.recorder, "stopped", "stopped", "cancelled", "Stop requested")
        except (ModelError, Unconfirmed, OutcomeUnknown, TurnCancelled):
            raise
        except Exception as e:
            detail = f"{self.adapter.framework}: {type(e).__name__}: {e}"
            log.warning("the framework's run failed", error=detail)
            return self.loop.end(self.recorder, "error", "stopped", "internal_error", detail[:2000])
        return self.loop.end(self.recorder, "completed", "completed")

    def _end(self, run_reason: str, status: str, code: str = "", detail: str = "") -> None:
        raise Ended(self.loop.end(self.recorder, run_reason, status, code, detail))


__all__ = ["FrameworkSteps", "FrameworkTools"]
