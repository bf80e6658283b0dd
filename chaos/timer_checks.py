"""What must hold of a turn's timers (docs/semantics.md, timers) after a ``timer`` trial
(``chaos.timers``), checked from its stream: pure functions, events in, violations out.

A wait is the ``tool_done``s with ``wake_at`` of one step (the calls between two model calls):
the turn goes on at the latest of them, at its next ``model_start``. For each:
- never early: that ``model_start`` is at or after the ``wake_at``;
- every timer wakes once: one ``run_started`` of cause ``timer`` at most between the wait and
  that ``model_start``; exactly one if a run ended ``waiting`` there and the turn went on (in a
  timer trial nothing else moves a waiting turn: no Stop, no decision, no client); none without
  such a run; never before the ``wake_at``;
- no wait twice: a run that ended ``waiting`` there began before the ``wake_at`` (a run begun
  early waits again; one begun after the time goes on);
and ``chaos_wait`` returned its wait once per call input (a repeat is answered from the record).
``lateness`` measures each wake: its ``run_started`` after the ``wake_at``, in seconds;
``waited_again`` counts the runs begun early that found the wait in the ledger.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ledger.events import ModelStart, RunEnded, RunStarted, ToolDone, ToolStart

#: the chaos trials' timer tool (``chaos.tools.chaos_wait``)
TIMER_TOOL = "chaos_wait"


@dataclass(frozen=True)
class Wait:
    """One step's wait: where its first ``tool_done`` with ``wake_at`` stands, where the turn
    went on (its next ``model_start``; None: it has not), and the latest ``wake_at``."""

    first: int
    went_on: int | None
    wake_at: float


def waits(events: Sequence[Any]) -> list[Wait]:
    found: dict[int | None, Wait] = {}
    for i, event in enumerate(events):
        if not (isinstance(event, ToolDone) and event.wake_at):
            continue
        went_on = next(
            (j for j in range(i + 1, len(events)) if isinstance(events[j], ModelStart)), None
        )
        earlier = found.get(went_on)
        if earlier is None:
            found[went_on] = Wait(i, went_on, event.wake_at)
        else:
            found[went_on] = Wait(earlier.first, went_on, max(earlier.wake_at, event.wake_at))
    return list(found.values())


def check(events: Sequence[Any]) -> list[str]:
    """Every timer invariant of one turn's stream."""
    out = []
    for wait in waits(events):
        out += _woke_once(events, wait)
    return [*out, *_returned_once(events)]


def _woke_once(events: Sequence[Any], wait: Wait) -> list[str]:
    end = len(events) if wait.went_on is None else wait.went_on
    span = events[wait.first + 1 : end]
    at = f"the wait until {wait.wake_at:.3f}"
    out = []
    if wait.went_on is not None:
        model = events[wait.went_on]
        if model.ts < wait.wake_at:
            out.append(f"{at}: its model call came {wait.wake_at - model.ts:.3f} s early")
    wakes = [e for e in span if isinstance(e, RunStarted) and e.cause == "timer"]
    ended_waiting = [e for e in span if isinstance(e, RunEnded) and e.reason == "waiting"]
    if len(wakes) > 1:
        out.append(f"{at}: woken {len(wakes)} times ({', '.join(e.run_id for e in wakes)})")
    if wakes and not ended_waiting:
        out.append(f"{at}: woken with no run that ended waiting")
    if wait.went_on is not None and ended_waiting and not wakes:
        out.append(f"{at}: the turn went on past it with no timer wake")
    out += [
        f"{at}: woken {wait.wake_at - e.ts:.3f} s early (run {e.run_id})"
        for e in wakes
        if e.ts < wait.wake_at
    ]
    began = {e.run_id: e.ts for e in events if isinstance(e, RunStarted)}
    out += [
        f"{at}: run {e.run_id}, begun {began[e.run_id] - wait.wake_at:.3f} s after it, waited again"
        for e in ended_waiting
        if e.run_id in began and began[e.run_id] >= wait.wake_at
    ]
    return out


def _returned_once(events: Sequence[Any]) -> list[str]:
    """``chaos_wait`` returned a wait once per input: its calls with a ``wake_at`` are no more
    than its distinct inputs started."""
    inputs = {e.signature for e in events if isinstance(e, ToolStart) and e.tool == TIMER_TOOL}
    returned = Counter(
        e.tool for e in events if isinstance(e, ToolDone) and e.wake_at and e.tool == TIMER_TOOL
    )[TIMER_TOOL]
    if returned > len(inputs):
        return [f"{TIMER_TOOL} returned a wait {returned} times for {len(inputs)} input(s)"]
    return []


def lateness(events: Sequence[Any]) -> list[float]:
    """Seconds each timer wake of the turn came after its wait's ``wake_at``."""
    out = []
    for wait in waits(events):
        end = len(events) if wait.went_on is None else wait.went_on
        out += [
            e.ts - wait.wake_at
            for e in events[wait.first + 1 : end]
            if isinstance(e, RunStarted) and e.cause == "timer"
        ]
    return out


def waited_again(events: Sequence[Any]) -> int:
    """Runs that began after a wait was recorded and before its time (a crash pickup, a
    redelivery) and found it in the ledger: each ended ``waiting`` again."""
    again = 0
    for wait in waits(events):
        end = len(events) if wait.went_on is None else wait.went_on
        span = events[wait.first + 1 : end]
        began = {e.run_id for e in span if isinstance(e, RunStarted)}
        ended = [e for e in span if isinstance(e, RunEnded) and e.reason == "waiting"]
        again += sum(e.run_id in began for e in ended)
    return again


def completed(status: str, code: str, continues: int) -> list[str]:
    """A timer trial's turn completes: a wait, and the faults around it, delay a turn; a stop
    they cause is continued (``continues`` times) to completion."""
    if status == "completed":
        return []
    how = f" ({code})" if code else ""
    return [f"the turn ended {status}{how} after {continues} Continue(s)"]


def too_late(late: Sequence[float], explained: bool, bound: float) -> list[str]:
    """A wake later than ``bound`` seconds with nothing in the trial to explain it."""
    worst = max(late, default=0.0)
    if explained or worst <= bound:
        return []
    return [f"a timer woke {worst:.2f} s late (more than {bound} s, no outage in the trial)"]
