"""The run's interrupts (worker/engine/tools/guard.py), with real signals in this process's main
thread: what each signal raises inside a run's window, what waits for a critical section's end,
what a lifted section lets through, and what happens outside a run."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest

from worker.base.errors import Interrupt, Shutdown, SoftLimit, TurnCancelled
from worker.engine.tools import guard as guard_module
from worker.engine.tools.guard import NUDGE, SOFT_LIMIT, DeferSignals

#: seconds a test may wait for a signal's handler to run (it runs within a few bytecodes)
DEADLINE_S = 5.0


@pytest.fixture(autouse=True)
def fresh_trap(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test gets its own trap state and the process's handlers back afterwards."""
    saved = {sig: signal.getsignal(sig) for sig in guard_module.SIGNALS}
    monkeypatch.setattr(guard_module, "_TRAP", guard_module._Trap())
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def wait_for_signal() -> None:
    """Block in a sleep (as a run blocks on a socket) until a handler raises."""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        time.sleep(0.01)
    raise AssertionError("no interrupt was raised")


def signal_self(sig: int) -> None:
    signal.pthread_kill(threading.main_thread().ident or 0, sig)


@pytest.mark.parametrize(
    ("sig", "raised"),
    [(SOFT_LIMIT, SoftLimit), (NUDGE, Shutdown), (signal.SIGTERM, Shutdown)],
)
def test_inside_a_run_each_signal_raises_its_interrupt_past_except_exception(
    sig: int, raised: type[Interrupt]
) -> None:
    guard = DeferSignals()
    with pytest.raises(raised), guard.running():
        try:
            signal_self(sig)
            wait_for_signal()
        except Exception:  # what a tool or an SDK's retry loop does
            pytest.fail("an interrupt was caught by except Exception")


def test_stop_from_another_thread_interrupts_a_blocked_run_as_turn_cancelled() -> None:
    guard = DeferSignals()
    with pytest.raises(TurnCancelled), guard.running():
        threading.Timer(0.05, guard.stop).start()
        wait_for_signal()


def test_a_signal_inside_a_critical_section_is_raised_when_the_section_ends() -> None:
    guard = DeferSignals()
    reached_end_of_section = False
    with pytest.raises(SoftLimit), guard.running():
        with guard:
            signal_self(SOFT_LIMIT)
            time.sleep(0.05)  # the handler runs here, and only notes the signal
            reached_end_of_section = True
        pytest.fail("the noted soft limit was not raised at the section's end")
    assert reached_end_of_section


def test_a_lifted_section_raises_what_was_noted_and_what_arrives_inside_it() -> None:
    guard = DeferSignals()
    with pytest.raises(SoftLimit), guard.running(), guard:
        signal_self(SOFT_LIMIT)
        time.sleep(0.05)
        with guard.lifted():
            pytest.fail("the noted soft limit was not raised on entering the lifted section")
    with pytest.raises(TurnCancelled), guard.running(), guard, guard.lifted():
        threading.Timer(0.05, guard.stop).start()
        wait_for_signal()


def test_after_a_lifted_section_the_deferral_holds_again() -> None:
    guard = DeferSignals()
    with pytest.raises(SoftLimit), guard.running():
        with guard:
            with guard.lifted():
                pass
            signal_self(SOFT_LIMIT)
            time.sleep(0.05)
            deferred = True
        pytest.fail("not raised at the section's end")
    assert deferred


def test_outside_a_run_the_soft_limit_goes_to_the_process_handler_and_a_nudge_is_only_noted() -> (
    None
):
    seen: list[int] = []
    signal.signal(SOFT_LIMIT, lambda signum, frame: seen.append(signum))
    guard = DeferSignals()
    guard.arm()
    signal_self(SOFT_LIMIT)
    signal_self(NUDGE)  # its default action would end this process
    time.sleep(0.05)
    assert seen == [SOFT_LIMIT]
    assert guard_module._TRAP.draining


def test_a_run_that_starts_after_a_shutdown_nudge_hands_over_at_once() -> None:
    guard = DeferSignals()
    guard.arm()
    os.kill(os.getpid(), NUDGE)
    time.sleep(0.05)
    with pytest.raises(Shutdown), guard.running():
        pytest.fail("the run started although the worker is shutting down")


def test_a_late_stop_nudge_after_the_run_is_not_taken_for_a_shutdown() -> None:
    guard = DeferSignals()
    with guard.running():
        guard_module._TRAP.stops_sent += 1  # as guard.stop() does, the signal arriving late
    signal_self(NUDGE)
    time.sleep(0.05)
    assert not guard_module._TRAP.draining


def test_a_stop_nudge_lost_before_a_blocking_call_is_sent_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first nudge is dropped (as one landing just before a blocking call is, until that
    call returns); the watcher's next calls send it again once RESEND_S has passed."""
    sent: list[int] = []
    real_kill = signal.pthread_kill

    def kill(thread_id: int, signum: int) -> None:
        sent.append(signum)
        if len(sent) > 1:
            real_kill(thread_id, signum)

    monkeypatch.setattr(signal, "pthread_kill", kill)
    monkeypatch.setattr(guard_module, "RESEND_S", 0.05)
    guard = DeferSignals()
    with pytest.raises(TurnCancelled), guard.running():
        guard.stop()
        guard.stop()  # too soon: not sent again
        assert sent == [NUDGE]
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            guard.stop()
            time.sleep(0.01)
        pytest.fail("the lost nudge was never sent again")
    assert sent == [NUDGE, NUDGE]


def test_an_answer_drops_a_soft_limit_and_hands_a_sigterm_on_after_it() -> None:
    """``answering()`` (a hand-over under way): the soft limit and a nudge never cut it; a SIGTERM
    reaches the process's own handler once the answer is done, not before."""
    terms: list[str] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: terms.append("after"))
    guard = DeferSignals()
    with guard.running():
        pass  # the run's window is over: its interrupt is being answered
    with guard.answering():
        for sig in (SOFT_LIMIT, NUDGE, signal.SIGTERM):
            signal_self(sig)  # its handler runs as the call returns, in this thread
        assert terms == [], "the SIGTERM waited for the answer's end"
        assert guard_module._TRAP.draining, "the shutdown nudge still drains the process"
    assert terms == ["after"]
