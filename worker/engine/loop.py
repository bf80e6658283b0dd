"""The agent loop: one run of one chunk of a turn (model -> tools -> model until the turn ends).

A run reads its turn's ledger once (with a process's ``EventCache``, only what is new since that
process last read it) and folds it into its journal and its conversation (with the cache, again
only what is new: a long turn's resume costs what its last chunk added, not all it holds). On a
resumed run that read is also the hard-block snapshot (layer 2), re-tried with backoff; if it
still fails the run stops with ``journal_unreadable`` rather than run writes blind. The journal
note (layer 1) is best-effort. Resumable transport errors resume inside the same run with the
nudge and a fresh snapshot; so does a write whose outcome is unknown (``OutcomeUnknown``: it
stays interrupted, and the resume meets it under the guard). Time limits are not the loop's
business: whatever ``interrupts`` the caller names (Celery's ``SoftTimeLimitExceeded``)
propagates out, once the text the run streamed and still buffers is written, and the caller
hands the turn to its next chunk. No celery here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import structlog

from ledger.approvals import ApprovalFold
from ledger.cache import EventCache, F
from ledger.durability import Confirms
from ledger.events import (
    ApprovalRequested,
    Event,
    Inherited,
    ModelDone,
    ModelStart,
    Resumed,
    TokenUsage,
    TurnStarted,
)
from ledger.journal import Journal
from ledger.note import journal_note
from ledger.store import Ledger
from ledger.usage import UsageFold
from worker.base import metrics
from worker.base.clock import Clock, Ids
from worker.base.errors import (
    ConfigError,
    JournalUnreadable,
    ModelError,
    OutcomeUnknown,
    TurnCancelled,
    Unconfirmed,
)
from worker.base.failpoints import OFF, Failpoints
from worker.base.settings import Settings
from worker.base.tracing import OFF as OFF_TRACER
from worker.base.tracing import Tracer
from worker.engine.flushes import SharedFlusher
from worker.engine.frameworks.base import Adapter
from worker.engine.frameworks.steps import FrameworkSteps, FrameworkTools
from worker.engine.history import Conversation
from worker.engine.models.base import (
    ChatModel,
    ModelRequest,
    TextDelta,
    ToolCall,
    ToolSchema,
    Usage,
)
from worker.engine.outcome import RunResult, Waits, waiting_on
from worker.engine.reading import READ_ERRORS, TurnReader
from worker.engine.recorder import Recorder, RunContext
from worker.engine.tools.approval import ApprovalPolicy
from worker.engine.tools.calls import Attempt
from worker.engine.tools.executor import ToolExecutor
from worker.engine.tools.guard import DeferSignals, Interrupts
from worker.engine.tools.registry import Registry
from worker.engine.tools.spec import client_spec
from worker.engine.tools.timers import pending_wake

log = structlog.get_logger("dres.loop")

SYSTEM_PROMPT = (
    "You are an agent that completes the user's request with the tools you are given. Tool calls "
    "with side effects (sending, creating) must not be repeated once they have succeeded."
)


class AgentLoop:
    def __init__(
        self,
        *,
        ledger: Ledger,
        registry: Registry,
        make_model: Callable[[str | None], ChatModel],
        settings: Settings,
        clock: Clock,
        ids: Ids,
        interrupts: tuple[type[BaseException], ...] = (),
        is_cancelled: Callable[[str], bool] = lambda turn_id: False,
        stop_polled: Callable[[str], bool] | None = None,
        guard: Interrupts | None = None,
        flusher: SharedFlusher | None = None,
        tool_redis: Any = None,
        failpoints: Failpoints = OFF,
        cache: EventCache | None = None,
        durable: Confirms | None = None,
        tracer: Tracer = OFF_TRACER,
        frameworks: Callable[[str | None], Adapter | None] = lambda loop: None,
    ) -> None:
        self.ledger = ledger
        #: how a run reads its turn (and a fork's, the turns it inherits): through the process's
        #: cache when there is one
        self.reader = TurnReader(ledger, cache, settings, clock)
        self.cache = cache
        self.registry = registry
        self.make_model = make_model
        self.settings = settings
        self.clock = clock
        self.ids = ids
        self.interrupts = interrupts
        #: Stop requested? Redis asked at safe points; the heartbeat's last read while streaming
        self.is_cancelled = is_cancelled
        self.stop_polled = stop_polled or is_cancelled
        #: the run's interrupts, its pool's way (prefork's signals, the default; gevent's greenlets)
        self.guard = guard or DeferSignals()
        #: the process's shared flusher of streamed text (a gevent pool's); None: each run's own
        self.flusher = flusher
        self.tool_redis = tool_redis
        self.failpoints = failpoints
        #: confirms a write's records as DRES_DURABILITY asks (None: ``ack``)
        self.durable = durable
        #: the process's traces: each model call a ``chat`` span (docs/tracing.md)
        self.tracer = tracer
        #: the framework agent a turn's ``loop`` names (``None``: dres's own loop; docs/loops.md)
        self.frameworks = frameworks
        self.tools = tuple(
            ToolSchema(s.name, s.description, s.schema) for s in registry.schemas().values()
        )
        #: which calls wait for a person (DRES_APPROVAL, a tool's needs_approval)
        self.approval = ApprovalPolicy.from_settings(settings)
        self.approval.check(registry)

    # -- a run -------------------------------------------------------------------------------

    def run(self, run: RunContext) -> RunResult:
        """Run one chunk of the turn until it ends, stops, or an interrupt propagates."""
        recorder = Recorder(
            self.ledger,
            run,
            self.clock,
            self.ids,
            [],
            flush_s=self.settings.text_flush_ms / 1000,
            flush_chars=self.settings.text_flush_chars,
            guard=self.guard,
            durable=self.durable,
            shared=self.flusher,
        )
        self.guard.arm()
        try:
            return self._run(run, recorder)
        except TurnCancelled as e:
            self.ledger.mend_after(e)  # the interrupt may have landed inside a Redis command
            return self._end(recorder, "stopped", "stopped", "cancelled", "Stop requested")
        except BaseException as e:
            # A soft limit, a shutdown, a crash of the run: the text it streamed goes to the
            # ledger before its caller records the hand-over or the failure.
            self.ledger.mend_after(e)
            self._flush_text(recorder)
            raise
        finally:
            recorder.close()

    @staticmethod
    def _flush_text(recorder: Recorder) -> None:
        chars = recorder.buffered_chars
        if not chars:
            return
        try:
            recorder.flush()
        except READ_ERRORS as e:
            log.warning("streamed text lost: it could not be written", chars=chars, error=repr(e))

    def _run(self, run: RunContext, recorder: Recorder) -> RunResult:
        try:
            read = self.reader.read(run)
        except JournalUnreadable as e:
            log.error("journal unreadable; stopping the resumed run", error=str(e))
            return self._end(recorder, "error", "stopped", "journal_unreadable", str(e))
        recorder.events, recorder.inherited = read.events, read.inherited
        journal, note = read.journal, read.note
        started = read.events[0] if read.events else None
        try:
            adapter = self.frameworks(started.loop if isinstance(started, TurnStarted) else None)
        except ConfigError as e:  # a loop this worker does not list (not the API's DRES_LOOP)
            log.error("the turn's loop cannot run here", error=str(e))
            return self._end(recorder, "error", "stopped", "internal_error", str(e))
        framework = FrameworkTools.of(adapter) if adapter is not None else None
        tools: tuple[ToolSchema, ...] = ()
        if framework is not None:
            registry = framework.registry
        else:
            registry, tools = self._tools_of(read.events)
        executor = ToolExecutor(
            registry,
            recorder,
            guard=self.guard,
            interrupts=self.interrupts,
            redis=self.tool_redis,
            failpoints=self.failpoints,
            approval=self.approval,
            max_result_bytes=self.settings.max_result_bytes,
            tracer=self.tracer,
        )
        if run.resumed:
            seen = len(recorder.events)
            waiting = self._settle_approvals(run, recorder, executor, journal)
            if waiting:
                return waiting_on(Waits(waiting), recorder.take_unwritten())
            # a timer the ledger holds and the time has not come (a run begun early: a crash
            # pickup, a decision on another call of the timer's step): the turn waits again
            wake_at = pending_wake(recorder.events, self.clock.now())
            if wake_at:
                return waiting_on(Waits(wake_at=wake_at), recorder.take_unwritten())
            if len(recorder.events) > seen and not self.settings.naive:
                # An approved call ran (or a denial was recorded): both layers see it.
                journal = recorder.journal()
                if self.settings.journal_note:
                    note = journal_note(journal)
            # Written with the first model_start: the prompt needs it, the ledger can wait a step.
            recorder.hold(Resumed, cause=run.cause, note=note)
            self._traced_resume(run.cause, note)
        elif read.inherits:
            # a fork's first run: what the turns it replaces did, before its first model call
            recorder.hold(Inherited, turns=read.inherits, note=note)
            self._traced_resume("fork", note)
        attempt = Attempt.begin(journal, run.turn_id)
        if adapter is not None and framework is not None:
            return FrameworkSteps(self, adapter, framework, recorder, executor, attempt).run()
        model = self.make_model(run.model)
        return self._steps(recorder, executor, model, attempt, tools)

    def _tools_of(self, events: list[Event]) -> tuple[Registry, tuple[ToolSchema, ...]]:
        """The turn's tools: the registry's, and the client tools its request declared (its
        ``turn_started``'s), which only its runs know."""
        started = events[0] if events else None
        declared = started.client_tools if isinstance(started, TurnStarted) else ()
        if not declared:
            return self.registry, self.tools
        specs = [client_spec(t.name, t.description, t.parameters) for t in declared]
        registry = self.registry.with_client_tools(specs)
        extra = [s for s in specs if registry.get(s.name) is s]
        if len(extra) < len(specs):
            log.warning("a client tool named as a registered tool is left out", tools=declared)
        schemas = tuple(ToolSchema(s.name, s.description, s.schema) for s in extra)
        return registry, self.tools + schemas

    def _settle_approvals(
        self,
        run: RunContext,
        recorder: Recorder,
        executor: ToolExecutor,
        journal: Journal | None,
    ) -> list[ApprovalRequested]:
        """Before the run's first model call, act on its turn's decided approval requests
        (docs/semantics.md): an approved call runs once, a denied one is recorded as blocked, an
        expired or voided one is asked again. Returns the requests still open: the run then ends
        waiting for them (none: it goes on to the model)."""
        entries = self._fold(run.turn_id, recorder.events, ApprovalFold).actionable()
        if not entries:
            return []
        attempt = Attempt.begin(journal, run.turn_id)
        waiting: list[ApprovalRequested] = []
        for entry in entries:
            decided = entry.decision
            if decided is None:
                waiting.append(entry.request)  # asked, then the run ended before it waited
                continue
            decision = {"dres.approval_id": decided.approval_id, "dres.decision": decided.decision}
            self.tracer.event("dres.approval.decided", decision)
            if decided.decision == "approve":
                if self.is_cancelled(run.turn_id):
                    raise TurnCancelled("Stop requested")
                executor.run_approved(attempt, entry.request)
            elif decided.decision == "deny":
                executor.deny(entry.request, decided.reason)
            else:
                waiting.append(executor.ask_again(entry.request))
        return waiting

    def _steps(
        self,
        recorder: Recorder,
        executor: ToolExecutor,
        model: ChatModel,
        attempt: Attempt,
        tools: tuple[ToolSchema, ...],
    ) -> RunResult:
        transport_resumes = 0
        run = recorder.run
        # What the model is asked is a fold over the events; a run's own events only ever follow
        # the ones before them, so each step folds only those recorded since the last.
        conversation = self._fold(run.turn_id, recorder.events, Conversation)
        folded = len(recorder.events)
        # The run's first safe point is its claim, whose metadata read also read the Stop flag.
        first = True
        while True:
            if run.stop_requested if first else self.is_cancelled(run.turn_id):
                return self._end(recorder, "stopped", "stopped", "cancelled", "Stop requested")
            first = False
            conversation.feed(recorder.events[folded:])
            folded = len(recorder.events)
            request = self._request(conversation, tools)
            if request.step >= self.settings.max_model_calls:
                detail = f"{request.step} model calls without finishing"
                return self._end(recorder, "error", "stopped", "loop_limit", detail)
            budget = self.settings.turn_token_budget  # DRES_TURN_TOKEN_BUDGET
            over = budget and self._fold(run.turn_id, recorder.events, UsageFold).over(budget)
            if over:
                return self._end(recorder, "stopped", "stopped", "budget", over)
            recorder.record(ModelStart, step=request.step, resume_step=request.resume_step)
            try:
                calls, usage = self._chat(recorder, model, request)
                recorder.record(ModelDone, tool_calls=len(calls), usage=usage)
                if usage is not None:
                    metrics.tokens_spent(model.name, usage.input_tokens, usage.output_tokens)
                if not calls:
                    return self._end(recorder, "completed", "completed")
                waiting = self._execute(recorder, executor, attempt, calls)
                if waiting is None:
                    return self._end(recorder, "stopped", "stopped", "cancelled", "Stop requested")
                if waiting:
                    return waiting_on(waiting, recorder.take_unwritten())
                continue
            except ModelError as e:
                ended = self._after_model_error(recorder, e, transport_resumes)
            except (Unconfirmed, OutcomeUnknown) as e:
                # a write's record the store could not confirm (DRES_DURABILITY), or a write
                # sent whose answer never came: it stays interrupted, and the resume meets it
                ended = self._after_transport_error(recorder, str(e), transport_resumes)
            if ended is not None:
                return ended
            transport_resumes += 1
            journal = None if self.settings.naive else recorder.journal()
            attempt = Attempt.begin(journal, run.turn_id)

    def _execute(
        self, recorder: Recorder, executor: ToolExecutor, attempt: Attempt, calls: list[ToolCall]
    ) -> Waits | None:
        """Run the step's calls in order; what some of them wait on (approval requests, client
        calls, a timer: the run then ends waiting), or None when Stop was requested before one."""
        waits = Waits()
        for call in calls:
            if self.is_cancelled(recorder.run.turn_id):
                return None
            outcome = executor.execute(attempt, call)
            if outcome.request is not None:
                waits.requests.append(outcome.request)
            if outcome.awaited:
                waits.calls.append((outcome.call_id, outcome.tool))
            if outcome.wake_at and outcome.wake_at > self.clock.now():
                waits.wake_at = max(waits.wake_at, outcome.wake_at)
        return waits

    def _chat(
        self, recorder: Recorder, model: ChatModel, request: ModelRequest
    ) -> tuple[list[ToolCall], TokenUsage | None]:
        """One model call, in its ``chat`` span (cut by an interrupt or an error: an error span)."""
        with self.tracer.chat(model.name) as span:
            calls, usage = self._stream(recorder, model, request)
            span.answered(usage, "tool_calls" if calls else "stop")
        return calls, usage

    def _stream(
        self, recorder: Recorder, model: ChatModel, request: ModelRequest
    ) -> tuple[list[ToolCall], TokenUsage | None]:
        calls: list[ToolCall] = []
        usage: TokenUsage | None = None
        turn_id = recorder.run.turn_id
        checked = self.clock.now()
        for item in model.stream(request):
            # what the model sent is kept first: a Stop ends the run with the text it received
            if isinstance(item, TextDelta):
                recorder.stream_text(item.text)
            elif isinstance(item, Usage):
                usage = TokenUsage(input_tokens=item.input_tokens, output_tokens=item.output_tokens)
            else:
                calls.append(item)
            if self.clock.now() - checked >= self.settings.cancel_poll_s:
                checked = self.clock.now()
                if self.stop_polled(turn_id):
                    raise TurnCancelled("Stop requested")
        return calls, usage

    def _after_model_error(
        self, recorder: Recorder, error: ModelError, transport_resumes: int
    ) -> RunResult | None:
        """Resume in the same run (None) or end it (the result), by the error's kind."""
        run = recorder.run
        log.warning("model call failed", code=error.code, error=error.message)
        if error.resumable:
            return self._after_transport_error(recorder, str(error), transport_resumes)
        if error.code == "rate_limit":
            already = any(
                isinstance(e, Resumed) and e.cause == "rate_limit" for e in recorder.events
            )
            if run.mode == "background" and not already:
                self.clock.sleep(self.settings.rate_limit_cooldown_s)
                self._resume_in_run(recorder, "rate_limit")
                return None
            return self._end(recorder, "error", "stopped", "rate_limit", str(error))
        return self._end(recorder, "error", "stopped", error.code, str(error))

    def _after_transport_error(
        self, recorder: Recorder, detail: str, transport_resumes: int
    ) -> RunResult | None:
        """A transport error (a model call's, or a record the store could not confirm): resume
        in the same run with the nudge and the note (None), or end it once the resumes are
        spent."""
        if transport_resumes < self.settings.max_transport_resumes:
            self._resume_in_run(recorder, "transport_error")
            return None
        return self._end(recorder, "transport_error", "stopped", "transport_error", detail)

    def _resume_in_run(self, recorder: Recorder, cause: str) -> None:
        note = None
        if self.settings.journal_note and not self.settings.naive:
            note = journal_note(recorder.journal())
        recorder.record(Resumed, cause=cause, note=note)
        self._traced_resume(cause, note)

    def _traced_resume(self, cause: str, note: str | None) -> None:
        self.tracer.event("dres.resume", {"dres.cause": cause, "dres.note.chars": len(note or "")})

    # -- what a framework's run shares with this loop (worker.engine.frameworks.steps) -----

    def after_model_error(
        self, recorder: Recorder, error: ModelError, transport_resumes: int
    ) -> RunResult | None:
        return self._after_model_error(recorder, error, transport_resumes)

    def after_transport_error(
        self, recorder: Recorder, detail: str, transport_resumes: int
    ) -> RunResult | None:
        return self._after_transport_error(recorder, detail, transport_resumes)

    def fresh_attempt(self, recorder: Recorder) -> Attempt:
        """The attempt after a resume in the run: a fresh journal snapshot (none when naive)."""
        journal = None if self.settings.naive else recorder.journal()
        return Attempt.begin(journal, recorder.run.turn_id)

    def fold_conversation(self, turn_id: str, events: list[Event]) -> Conversation:
        return self._fold(turn_id, events, Conversation)

    def fold(self, turn_id: str, events: list[Event], kind: Callable[[], F]) -> F:
        return self._fold(turn_id, events, kind)

    def end(
        self, recorder: Recorder, run_reason: str, status: str, code: str = "", detail: str = ""
    ) -> RunResult:
        return self._end(recorder, run_reason, status, code, detail)

    # -- reading the ledger ------------------------------------------------------------------

    def _fold(self, turn_id: str, events: list[Event], kind: Callable[[], F]) -> F:
        return self.reader.fold(turn_id, events, kind)

    def _request(self, conversation: Conversation, tools: tuple[ToolSchema, ...]) -> ModelRequest:
        return ModelRequest(
            system=SYSTEM_PROMPT,
            messages=tuple(conversation.messages()),
            tools=tools,
            step=conversation.step,
            resume_step=conversation.resume_step,
            prior_attempts=conversation.prior_attempts,
        )

    # -- ending ------------------------------------------------------------------------------

    @staticmethod
    def _end(
        recorder: Recorder, run_reason: str, status: str, code: str = "", detail: str = ""
    ) -> RunResult:
        return RunResult(status, code, detail, run_reason, tuple(recorder.take_unwritten()))
