"""The chunk path: claim the pending run, run it, and record how it ended or hand it over.

``run_chunk`` is the one path of a chunk, for the Celery task and the test harness alike.
"""

from __future__ import annotations

import redis
import structlog

from ledger.errors import FencedOut, LedgerError, StoreFull, TransitionRefused
from ledger.lease import Lease
from ledger.store import MetaValue
from ledger.turn import Step, StopCode, TurnStatus
from worker.base import metrics
from worker.base.errors import Shutdown, SoftLimit, TurnCancelled
from worker.engine.loop import AgentLoop
from worker.engine.outcome import RunResult
from worker.engine.recorder import RunContext
from worker.lifecycle.base import LifecycleBase

log = structlog.get_logger("dres.lifecycle")

#: the causes of a run that resumes a turn whose previous run died
TAKEN_OVER = frozenset({"reaper", "redelivery"})


class ChunkPath(LifecycleBase):
    def claim(self, turn_id: str, run_id: str) -> RunContext | None:
        """Claim the turn's pending run (recording run_started); None when ``run_id`` is not it.

        With the process's cache, the claim also reads what is new of the turn in its atomic
        step: the run's snapshot, with no round trip of its own.
        """
        cache = self.cache
        lease_until = self.ms(self.settings.lease_s)
        claim = self.store.claim(
            turn_id,
            run_id,
            lease_until_ms=lease_until,
            event_id=self.ids.new("ev"),
            ts=self.clock.now(),
            read_from=cache.read_point(turn_id) if cache is not None else "",
        )
        if claim.lease is None or claim.meta is None:
            return None
        meta = claim.meta
        return RunContext(
            claim.lease,
            mode=meta.mode,
            model=meta.model or None,
            stop_requested=meta.stop_requested,
            snapshot=cache.absorb(claim) if cache is not None else None,
            chunk_base=meta.chunk_base,
            conversation_id=meta.conversation_id,
            trace=meta.trace,
        )

    def run_chunk(
        self,
        turn_id: str,
        run_id: str,
        loop: AgentLoop,
        *,
        interrupts: tuple[type[BaseException], ...],
        redelivered: bool = False,
    ) -> str:
        """One chunk: claim the pending run, run it, and record how it ended (or hand it over).

        ``interrupts`` (Celery's soft limit) hand the turn to its next chunk wherever they land,
        also while the ending is being recorded: a turn that already ended refuses the hand-over.
        One that lands in the hand-over (or the stop) answering an earlier one is dropped.
        Returns what happened, in a word or two.
        """
        hand_over: tuple[type[BaseException], ...] = (SoftLimit, *interrupts)
        cut: tuple[type[BaseException], ...] = (*hand_over, Shutdown)
        try:
            run = self.claim(turn_id, run_id)
        except cut as e:
            # a Redis slow to answer the claim (a stall, a failover) let the interrupt in
            self.ledger.mend_after(e)
            with loop.guard.answering():
                return self.cut_claim(turn_id, run_id, e)
        if run is None:
            return self.not_claimed(turn_id, run_id, redelivered)
        structlog.contextvars.bind_contextvars(chunk=run.chunk, epoch=run.epoch)
        metrics.observe_handoff(run.cause, run.snapshot)
        traced = self.tracer.run(
            trace=run.trace, turn_id=turn_id, run_id=run_id, chunk=run.chunk, cause=run.cause
        )
        with traced:
            if run.cause in TAKEN_OVER:
                self.tracer.event("dres.takeover", {"dres.cause": run.cause})
            return self._run_claimed(run, loop, hand_over)

    def _claimed(self, run: RunContext) -> None:
        """Tell the hooks the run's message left the broker (``Hooks.claimed``): a turn waiting
        for its tenant may take its place there. Best effort: the run goes on regardless."""
        try:
            self.let_through(self.hooks.claimed(run))
        except (LedgerError, redis.RedisError) as e:
            log.warning("could not let waiting turns through after the claim", error=repr(e))

    def _run_claimed(
        self, run: RunContext, loop: AgentLoop, hand_over: tuple[type[BaseException], ...]
    ) -> str:
        try:
            with loop.guard.running(), self.heartbeat(run, loop.guard.stop):
                self._claimed(run)
                result = loop.run(run)
                return self.finish(run, result)
        except hand_over as e:
            self.ledger.mend_after(e)  # the interrupt may have landed inside a Redis command
            with loop.guard.answering():  # a second interrupt must not cut the hand-over
                return self.chain(run)
        except Shutdown as e:
            self.ledger.mend_after(e)
            with loop.guard.answering():
                return self.chain(run, "handed over: the worker is shutting down")
        except TurnCancelled as e:
            # Stop landed after the run's own end was decided: record the stop, unless it ended
            self.ledger.mend_after(e)
            with loop.guard.answering():
                return self.stop_now(run)
        except FencedOut as e:
            log.warning("another run holds the turn; this one stops writing", error=str(e))
            return "fenced-out"
        except StoreFull as e:
            return self.stop_full(run, e)
        except (LedgerError, redis.ConnectionError, redis.TimeoutError):
            # Redis is unreachable: nothing can be recorded; the lease runs out, the reaper acts
            raise
        except Exception as e:
            log.exception("chunk failed")
            self.ledger.mend_after(e)  # a broken connection must not keep the failure unrecorded
            self.fail(run, e)
            return "failed"

    def cut_claim(self, turn_id: str, run_id: str, interrupt: BaseException) -> str:
        """The soft limit (or a shutdown) landed in the claim, which may or may not have been
        taken: the metadata says. Taken: the run holds the turn under a lease that nothing would
        renew, so it hands the turn over at once, as at any soft limit, instead of leaving it to
        the reaper once the lease runs out. Not taken: the run is still pending, and its message,
        acknowledged with this task, is sent again by the reaper (a lost message)."""
        meta = self.store.meta(turn_id)
        if meta.run_id != run_id or meta.status != TurnStatus.RUNNING:
            log.warning("interrupted before its claim landed", why=repr(interrupt))
            return "not-claimed"
        lease = Lease(turn_id, run_id, meta.epoch, meta.chunk, meta.next_cause)
        run = RunContext(
            lease,
            mode=meta.mode,
            model=meta.model or None,
            chunk_base=meta.chunk_base,
            conversation_id=meta.conversation_id,
        )
        structlog.contextvars.bind_contextvars(chunk=run.chunk, epoch=run.epoch)
        if isinstance(interrupt, Shutdown):
            return self.chain(run, "handed over: the worker is shutting down")
        return self.chain(run)

    def finish(self, run: RunContext, result: RunResult) -> str:
        """Record the run's and the turn's end in one fenced step; the turn's keys then expire.
        A run that ends waiting for approval leaves the turn ``waiting`` instead."""
        if result.status == TurnStatus.WAITING:
            return self.wait(run, result)
        if result.status == TurnStatus.COMPLETED:
            step, ended = Step.COMPLETE, self.turn_ended(run, TurnStatus.COMPLETED)
        else:
            code, detail = StopCode.of(result.code), result.detail
            if code == StopCode.CANCELLED:
                code, detail = self.stop_reason(run.turn_id)
            step, ended = Step.STOP, self.turn_ended(run, TurnStatus.STOPPED, code, detail)
        ran = self.run_ended(run, result.run_reason, result.detail)
        self.close(
            run.turn_id,
            step,
            self.store.holder(run.lease),
            [*result.held, ran, ended],
            conversation_id=run.conversation_id,
        )
        self.failpoints.hit("turn.ended")  # chaos and tests: a soft limit right after the end
        if self.cache is not None and step == Step.COMPLETE:
            self.cache.forget(run.turn_id)
        return f"{ended.status}: {ended.code}" if ended.code else ended.status

    def stop_full(self, run: RunContext, error: StoreFull) -> str:
        """Redis refused a write for memory: the turn stops with ``store_full`` (Continue once
        memory frees; never continued automatically). The refused events (a ``tool_done`` whose
        effect ran, text) go into the stop's own step, which may write at ``maxmemory``: a
        recorded effect is never lost silently."""
        detail = str(error)
        log.error("redis refused a write for memory; the turn stops", error=detail)
        ended = self.turn_ended(run, TurnStatus.STOPPED, StopCode.STORE_FULL, detail)
        ran = self.run_ended(run, "error", detail)
        events = [*error.unrecorded, ran, ended]
        try:
            self.close(
                run.turn_id,
                Step.STOP,
                self.store.holder(run.lease),
                events,
                conversation_id=run.conversation_id,
                allow_oom=True,
            )
        except TransitionRefused as e:
            log.info("the turn moved on before its store_full stop", why=str(e))
            return "ended"
        except LedgerError:
            # not even the stop could be written: the lease runs out, the reaper acts
            log.exception("could not record the store_full stop")
            return "failed"
        return f"stopped: {StopCode.STORE_FULL}"

    def stop_now(self, run: RunContext) -> str:
        stopped = RunResult("stopped", StopCode.CANCELLED, "Stop requested", "stopped")
        try:
            return self.finish(run, stopped)
        except TransitionRefused as e:
            log.info("Stop after the run's turn moved on; nothing to stop", why=str(e))
            return "ended"

    def chain(self, run: RunContext, detail: str = "") -> str:
        """The soft limit (or a shutdown, which ``detail`` says): hand the turn to its next
        chunk, or stop it at the chunk budget."""
        budget = self.settings.max_chunks
        # chaos's faults of the hand-over fall between its step and its message: they keep the
        # two apart, as a dispatcher that cannot send within the step does
        apart = self.failpoints.armed("chunk.handoff")
        try:
            if run.chunk + 1 - run.chunk_base >= budget:
                detail = f"the turn used its {budget} chunks"
                ended = self.turn_ended(run, TurnStatus.STOPPED, StopCode.MAX_CHUNKS, detail)
                ran = self.run_ended(run, "soft_limit", detail)
                expect = self.store.holder(run.lease)
                self.close(
                    run.turn_id,
                    Step.STOP,
                    expect,
                    [ran, ended],
                    conversation_id=run.conversation_id,
                )
                return "stopped: max_chunks"
            successor, sent = self._hand_over(run, "soft_limit", detail, send=not apart)
        except TransitionRefused as e:
            log.info("soft limit after the run's turn moved on; nothing to hand over", why=str(e))
            return "ended"
        self.tracer.event(
            "dres.hand_over", {"dres.successor": successor, "dres.reason": detail or "soft_limit"}
        )
        if sent:
            # chaos only: a crash or a store fault once the step and its message are out
            self.failpoints.hit("chunk.sent")
            log.info("chained the next chunk", successor=successor, why=detail or "soft limit")
            return "chained"
        fault = self.failpoints.hit("chunk.handoff")  # chaos only: crash, drop or duplicate here
        if fault == "drop":
            self.store.watch(run.turn_id, self.ms(self.settings.handoff_grace_s))
            return "chained (message dropped)"
        # The successor's message first, its look after: until the look lands, the one set
        # for this run's lease end stands in for it, and a look that lands after the
        # successor's claim does not put off the claim's own (sooner only).
        self.dispatcher.dispatch(run.turn_id, successor, run.mode)
        self.store.watch(run.turn_id, self.ms(self.settings.handoff_grace_s), sooner=True)
        if fault == "duplicate":
            self.dispatcher.dispatch(run.turn_id, successor, run.mode)
        log.info("chained the next chunk", successor=successor, why=detail or "soft limit")
        return "chained"

    def hand_over(self, run: RunContext, reason: str = "soft_limit", detail: str = "") -> str:
        """End ``run`` and record its successor (the next chunk) as the turn's pending run.

        One fenced step: a run that no longer holds the turn, or whose turn ended, cannot hand it
        over. Returns the successor's run id, which the caller then dispatches (ids only).
        """
        return self._hand_over(run, reason, detail, send=False)[0]

    def _hand_over(self, run: RunContext, reason: str, detail: str, send: bool) -> tuple[str, bool]:
        """``hand_over``; with ``send``, the successor's message goes out in the same atomic
        step where the dispatcher can make it so (``Dispatcher.prepare``: the broker is the
        ledger's server), with the reaper's look at the turn: one round trip, and no crash
        between the step and its message. Returns the successor's id and whether it was sent.
        """
        ran = self.run_ended(run, reason, detail)  # first: its time is the hand-over's start
        successor = self.ids.new("run")
        fields: dict[str, MetaValue] = {
            "next_run": successor,
            "next_chunk": run.chunk + 1,
            "next_cause": "next_chunk",
            "dispatched": self.clock.now(),
            "redispatches": 0,
        }
        outgoing = None
        if send and self.store.sends_with_steps:
            outgoing = self.dispatcher.prepare(run.turn_id, successor, run.mode)
        self.store.transition(
            run.turn_id,
            Step.HAND_OVER,
            expect=self.store.holder(run.lease),
            events=[ran],
            fields=fields,
            outgoing=outgoing,
            look_at_ms=self.ms(self.settings.handoff_grace_s),
        )
        return successor, outgoing is not None

    def fail(self, run: RunContext, error: BaseException) -> None:
        """A chunk raised: the turn stops (``internal_error``) with Continue available."""
        detail = repr(error)[:500]
        try:
            ended = self.turn_ended(run, TurnStatus.STOPPED, StopCode.INTERNAL_ERROR, detail)
            ran = self.run_ended(run, "error", detail)
            expect = self.store.holder(run.lease)
            self.close(
                run.turn_id, Step.STOP, expect, [ran, ended], conversation_id=run.conversation_id
            )
        except LedgerError:
            log.exception("could not record the failure")

    def not_claimed(self, turn_id: str, run_id: str, redelivered: bool) -> str:
        meta = self.store.meta(turn_id)
        if redelivered and meta.run_id == run_id and meta.status == TurnStatus.RUNNING:
            # This very run held the turn and its message came back: its worker may be lost, or
            # the message was put back under a live run (the broker's visibility timeout, or
            # kombu restoring its unacknowledged messages as it reconnects after a Redis
            # restart). Only a lease that ran out says which, and not even that just after an
            # outage, when every live run's lease ran out unrenewed: the reaper, which watches
            # Redis for outages (``Reaper._calm_for``), judges it, now or when the lease ends.
            if meta.lease_until > self.ms():
                self.store.watch(turn_id, meta.lease_until)
                return "holder alive"
            self.store.watch(turn_id, self.ms())
            log.info("redelivered message of a run whose lease ran out; left to the reaper")
            return "holder late: left to the reaper"
        log.info("duplicate or stale chunk message; nothing to run", status=meta.status)
        return "not-claimed"
