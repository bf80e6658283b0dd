"""The one service of a turn's lifecycle (docs/semantics.md): every step a turn takes, decided here.

Each step is a transition of the ledger's state machine (``ledger.turn.TABLE``) carried out
atomically by ``TurnStore``; a step whose turn moved on in between (another client, another
reaper, the run itself) is refused there, so two actors racing for a turn get one winner and the
others a clear refusal. The chunk task, the API, the CLI, the reaper and the test harness all call
this service; the chunk path (``run_chunk``) is the same for all of them. Its parts:
``ChunkPath`` (a run's own steps), ``Control`` (Stop, Continue, takeovers) and ``Approvals``
(waiting for a person, decisions, expiry), over ``LifecycleBase``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypedDict, Unpack

import redis
import structlog

from ledger.errors import LedgerError
from ledger.events import ClientTool, TurnStarted
from ledger.schedules import Schedule
from ledger.store import MetaValue
from ledger.turn import TurnStatus
from worker.base.errors import InvalidInput
from worker.engine.models import make_model
from worker.engine.recorder import make_event
from worker.lifecycle.approvals import Approvals, Decided
from worker.lifecycle.base import NOT_BLANK, NewTurn, Outcome, is_blank
from worker.lifecycle.chunks import ChunkPath
from worker.lifecycle.control import Control
from worker.lifecycle.conversation import Context
from worker.lifecycle.forks import Forked, ForkPlan, Forks, Sent
from worker.lifecycle.line import Line
from worker.lifecycle.outputs import ClientOutputs
from worker.lifecycle.schedules import Schedules
from worker.lifecycle.tenancy import DEFAULT as DEFAULT_TENANT
from worker.lifecycle.tenancy import tenant_of
from worker.lifecycle.timers import Timers

log = structlog.get_logger("dres.lifecycle")

MODES = ("foreground", "background")
#: what a new message does while its conversation has a live turn (DRES_DOUBLE_TEXT)
DOUBLE_TEXT = ("queue", "interrupt", "reject")


class TurnOptions(TypedDict, total=False):
    """What a caller may say of a new turn besides its message (``enqueue``, ``create``)."""

    conversation_id: str | None
    #: ``foreground`` (the default) or ``background``
    mode: str
    #: a model spec; None: ``DRES_MODEL``
    model: str | None
    turn_id: str | None
    #: the caller's ``traceparent``: the parent of the turn's trace
    trace_parent: str | None
    #: the client's id of the user message (None: one is made)
    message_id: str | None
    #: ``queue``, ``interrupt`` or ``reject`` (None: DRES_DOUBLE_TEXT)
    double_text: str | None
    #: tools the client runs, declared by the request (an AG-UI request's ``tools``)
    client_tools: Sequence[ClientTool]
    #: the tenant the turn belongs to (None: ``default``)
    tenant: str | None
    #: the agent loop the turn runs: one of ``DRES_LOOP``'s entries, by its text (None: the
    #: default, its first)
    loop: str | None
    #: a turn a schedule starts: the schedule's id and the tick it fires (seconds since the
    #: epoch), recorded on its ``turn_started``
    schedule_id: str | None
    tick_at: float | None


class SendOptions(TypedDict, total=False):
    """What a chat protocol's request says besides its message (``send``)."""

    mode: str
    model: str | None
    trace_parent: str | None
    double_text: str | None
    client_tools: Sequence[ClientTool]
    #: the new turn's tenant (None: ``default``; a fork: its source's)
    tenant: str | None


class Lifecycle(ChunkPath, Control, Approvals, ClientOutputs, Timers, Line, Forks, Schedules):
    def enqueue(self, message: str, **options: Unpack[TurnOptions]) -> NewTurn:
        """Record the turn and send its first chunk, through its conversation's line: at once
        while no other turn of the conversation is live, else by ``DRES_DOUBLE_TEXT`` (or the
        request's ``double_text``): ``queue`` holds it until the live turn ends, ``interrupt``
        stops the live turn (``superseded``) first, ``reject`` refuses (``Refused``). A repeat of
        the conversation's newest message (same ``message_id``, same text) records nothing and
        returns that turn.

        All or nothing, as far as Redis lets it be: when a step fails after the turn may have
        been recorded (Redis out of memory or gone part way, the broker unreachable), the turn is
        taken back before the error is raised, so the caller's failure leaves no turn that runs
        later. If even that cannot reach Redis, the turn stays queued and the reaper sends its
        chunk, as after a crash between the two steps; a repeat with the API's Idempotency-Key
        finds it.
        """
        mode, model = options.get("mode", "foreground"), options.get("model")
        conversation_id = options.get("conversation_id")
        double_text = options.get("double_text") or self.settings.double_text
        if mode not in MODES:
            raise InvalidInput(f"mode must be foreground or background, not {mode!r}")
        if double_text not in DOUBLE_TEXT:
            raise InvalidInput(
                f"double_text must be queue, interrupt or reject, not {double_text!r}"
            )
        if is_blank(message):
            raise InvalidInput("message is empty")
        make_model(model or self.settings.model, self.clock)  # a bad spec fails here, not later
        self.check_loop(options.get("loop"))
        tenant = tenant_of(options.get("tenant"))
        if conversation_id:
            repeated = self.repeated(conversation_id, options.get("message_id"), message)
            if repeated is not None:
                return repeated
        self.hooks.refuse(tenant)  # a tenant with its most turns queued: nothing is recorded
        if conversation_id:
            self.make_way(conversation_id, double_text)
        turn_id = options.get("turn_id") or self.ids.new("turn")
        # A turn of a conversation goes through its line, then its tenant's admission; a new
        # conversation's turn starts at once when its tenant's admission allows (it takes its
        # slot before it is recorded), else it waits as a held one does.
        held = bool(conversation_id) or not self.hooks.start(tenant, turn_id)
        conversation_id = conversation_id or self.ids.new("conv")
        named: TurnOptions = {
            **options,
            "turn_id": turn_id,
            "conversation_id": conversation_id,
            "tenant": tenant,
        }
        try:
            turn = self.create(message, held=held, **named)
            if turn.existed:
                return self._made_meanwhile(turn, took_slot=not held)
            if held:
                turn = self.admit(turn, double_text)
            else:
                self.launch(turn.turn_id, turn.run_id, mode)
        except Exception as e:
            self._take_back(turn_id, conversation_id, e)
            raise
        return turn

    def _made_meanwhile(self, turn: NewTurn, *, took_slot: bool) -> NewTurn:
        """A turn whose given id another process took meanwhile (a schedule's tick fired by two
        reapers): nothing of ours was recorded or sent. A slot ``start`` took is the turn's own
        (a slot is held by a turn id, never twice), so it stays while the turn is live; once the
        turn ended or waits, ours is one it no longer holds, and is given back."""
        meta = self.store.lines.metas([turn.turn_id])[0]
        if took_slot and (meta is None or meta.ended or meta.status == TurnStatus.WAITING):
            self.give_back(turn.turn_id)
        log.info("turn made meanwhile by another process", turn_id=turn.turn_id)
        return turn

    def enqueue_for_tick(self, schedule: Schedule, tick_ms: int, turn_id: str) -> NewTurn:
        """A schedule's tick's turn (``Schedules.start_tick``): a background turn of its
        message under the tick's derived id, recording which schedule and tick made it."""
        return self.enqueue(
            schedule.message,
            turn_id=turn_id,
            conversation_id=schedule.conversation_id,
            model=schedule.model,
            tenant=schedule.tenant,
            mode="background",
            schedule_id=schedule.schedule_id,
            tick_at=tick_ms / 1000,
        )

    def check_loop(self, loop: str | None) -> None:
        """A turn's ``loop`` is one of ``DRES_LOOP``'s entries, by its exact text (None: the
        default); else ``InvalidInput`` naming ``loop``. Nothing is imported: the API accepts a
        loop by name, and the worker that runs it loads its agent."""
        listed = [str(spec) for spec in self.settings.loops]
        if loop is not None and loop not in listed:
            raise InvalidInput(f"loop: {loop!r} is not one of DRES_LOOP's: {', '.join(listed)}")

    def fork(
        self,
        turn_id: str,
        *,
        message: str | None = None,
        model: str | None = None,
        conversation: str = "same",
        message_id: str | None = None,
        trace_parent: str | None = None,
        client_tools: Sequence[ClientTool] | None = None,
        tenant: str | None = None,
    ) -> Forked:
        """A new turn at ``turn_id`` (docs/semantics.md, forks) with its message or ``message``,
        replacing it and every later turn of its conversation (``conversation`` ``"same"``), or
        in a new conversation whose history is the source's turns before it (``"new"``); either
        way inheriting their journal. It goes through its conversation's line: behind a replaced
        turn still stopping, at once otherwise."""
        source = self.fork_source(turn_id)
        text = source.started.message if message is None else message
        if is_blank(text):
            raise InvalidInput("message is empty")
        model = model or source.meta.model or None
        make_model(model or self.settings.model, self.clock)
        tenant = source.meta.tenant if tenant is None else tenant_of(tenant)
        self.hooks.refuse(tenant)
        plan = self.plan_fork(source, conversation)
        conversation_id = source.meta.conversation_id
        if conversation == "new":
            conversation_id = self.ids.new("conv")
        fork_id = self.ids.new("turn")
        options: TurnOptions = {
            "conversation_id": conversation_id,
            "mode": source.meta.mode,
            "model": model,
            "turn_id": fork_id,
            "trace_parent": trace_parent,
            "message_id": message_id or source.meta.message_id or None,
            # a fork's request declares its own client tools; none declared: the source's
            "client_tools": source.started.client_tools if client_tools is None else client_tools,
            "tenant": tenant,
        }
        try:
            turn = self.create(text, held=True, fork=plan, **options)
            if conversation == "new":
                self.store.conversations.set_base(conversation_id, self.fork_history(source))
            self.mark_replaced(fork_id, plan.replaces)
            turn = self.admit(turn, "queue")
        except Exception as e:
            self._take_back(fork_id, conversation_id, e)
            raise
        replaces = plan.replaces if conversation == "same" else source.current
        log.info("forked", turn_id=fork_id, fork_of=turn_id, replaces=list(replaces))
        return Forked(fork_id, conversation_id, replaces, turn.run_id)

    def send(
        self,
        conversation_id: str,
        message: str,
        *,
        message_id: str | None = None,
        regenerate: str | bool = False,
        **options: Unpack[SendOptions],
    ) -> Sent:
        """A chat protocol's user message, matched to the conversation's turns by its id
        (docs/semantics.md, forks): ``regenerate`` (True, or the id of the answer to regenerate)
        forks the turn answering it with its own message (the same answer regenerated again, once
        a fork replaced it, is that fork: a retried request); a turn's own message again (same
        id, same text) is a repeat and records nothing; a turn's id with other text (an edit)
        forks that turn with ``message``; anything else is a new turn."""
        fork = _fork_options(options)
        if regenerate:
            done = self.regenerated(conversation_id, regenerate)
            if done is not None:  # the same regenerate again (a retried request): its fork
                return Sent(done, conversation_id, "repeat")
            target = self.regenerate_target(conversation_id, regenerate, message_id)
            if target is not None:
                forked = self.fork(target, message_id=message_id, **fork)
                return Sent(forked.turn_id, forked.conversation_id, "fork", forked.replaces)
        elif message_id and (match := self.turn_of_message(conversation_id, message_id)):
            meta, started, _ = match
            if started.message == message:
                # the newest turn's own message again (a retried request, a second tab), or a
                # late copy of an older request: nothing starts, the turn is streamed
                return Sent(meta.turn_id, conversation_id, "repeat")
            forked = self.fork(meta.turn_id, message=message, message_id=message_id, **fork)
            return Sent(forked.turn_id, forked.conversation_id, "fork", forked.replaces)
        turn = self.enqueue(
            message, conversation_id=conversation_id, message_id=message_id, **options
        )
        return Sent(turn.turn_id, turn.conversation_id, "new")

    def _take_back(self, turn_id: str, conversation_id: str, error: Exception) -> None:
        try:
            withdrawn = self.withdraw(turn_id, conversation_id)
            if withdrawn:
                self.give_back(turn_id)
        except (redis.RedisError, LedgerError) as e:
            log.warning(
                "could not take back what a failed creation may have recorded; a turn recorded "
                "is dispatched by the reaper",
                turn_id=turn_id,
                error=repr(error),
                withdraw_error=repr(e),
            )
            return
        if not withdrawn:
            log.warning("a turn whose creation failed went on", turn_id=turn_id, error=repr(error))

    def create(
        self,
        message: str,
        context: Context | None = None,
        *,
        held: bool = False,
        fork: ForkPlan | None = None,
        **options: Unpack[TurnOptions],
    ) -> NewTurn:
        """Record a new turn (``turn_started``, queued, its first run pending); no dispatch.
        ``context``: what it knows of its conversation (none: nothing). ``held``: no run
        pending yet: it waits for its conversation's line (``Line.advance``), which records its
        context when it lets it through. ``fork``: the turn is a fork (``Forks.fork``)."""
        context = context or Context()
        turn_id = options.get("turn_id") or self.ids.new("turn")
        conversation_id = options.get("conversation_id") or self.ids.new("conv")
        mode, model = options.get("mode", "foreground"), options.get("model")
        message_id = options.get("message_id") or self.ids.new("msg")
        run_id = "" if held else self.ids.new("run")
        tenant = options.get("tenant") or DEFAULT_TENANT
        event = make_event(
            TurnStarted,
            self.clock,
            self.ids,
            turn_id,
            run_id or "control",
            0,
            conversation_id=conversation_id,
            message=message,
            mode=mode,
            model=model,
            prior_turn_note=context.prior_turn_note,
            earlier_turns=context.earlier_turns,
            message_id=message_id,
            fork_of=fork.fork_of if fork else None,
            inherits=fork.inherits if fork else (),
            replaces=fork.replaces if fork else (),
            client_tools=tuple(options.get("client_tools") or ()),
            tenant=tenant,
            loop=options.get("loop"),
            schedule_id=options.get("schedule_id"),
            tick_at=options.get("tick_at"),
        )
        fields: dict[str, MetaValue] = {
            "model": model or "",
            "message_id": message_id,
            "tenant": tenant,
        }
        if held:
            fields["held"] = 1
        if fork:
            fields["fork_of"] = fork.fork_of
        look_at = self.ms(self.settings.handoff_grace_s)
        recorded = self.tracer.turn(
            turn_id=turn_id,
            conversation_id=conversation_id,
            mode=mode,
            parent=options.get("trace_parent"),
        )
        with recorded as trace:
            if trace:
                fields["trace"] = trace
            made = self.store.create(event, first_run=run_id, look_at_ms=look_at, fields=fields)
        if not made:  # its given id was taken meanwhile: that turn's conversation, no run of ours
            there = self.store.lines.metas([turn_id])[0]
            conversation_id = there.conversation_id if there is not None else conversation_id
            return NewTurn(turn_id, conversation_id, "", existed=True)
        return NewTurn(turn_id, conversation_id, run_id)

    def tenant_view(self, tenant: str) -> dict[str, object]:
        """``GET /v1/tenants/{tenant}``: how many of its turns run and wait, and its limits."""
        return self.tenancy.view(tenant_of(tenant))

    def withdraw(self, turn_id: str, conversation_id: str) -> bool:
        """Take back a turn whose creation failed part way (its first chunk could not be sent,
        or Redis refused a write after the turn was recorded), so that a failed request leaves
        no turn that runs later; False when the turn went on (claimed, stopped) and stays."""
        return self.store.withdraw(turn_id, conversation_id)


class ForkOptions(TypedDict, total=False):
    model: str | None
    trace_parent: str | None
    client_tools: Sequence[ClientTool] | None
    tenant: str | None


def _fork_options(options: SendOptions) -> ForkOptions:
    """What a chat request's options say of a fork: its model, trace parent and client tools
    (its mode is the forked turn's)."""
    return {
        "model": options.get("model"),
        "trace_parent": options.get("trace_parent"),
        "client_tools": options.get("client_tools"),
        "tenant": options.get("tenant"),
    }


__all__ = [
    "DOUBLE_TEXT",
    "NOT_BLANK",
    "Decided",
    "ForkPlan",
    "Forked",
    "Lifecycle",
    "NewTurn",
    "Outcome",
    "Sent",
    "is_blank",
]
