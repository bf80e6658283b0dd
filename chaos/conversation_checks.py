"""What must hold across the turns of one conversation (the ``conversation`` trials,
docs/semantics.md: one live turn per conversation; forks), checked from the ledger and the tools'
effects.

Pure functions, like ``chaos.invariants`` (which still judges each turn on its own): a
conversation's turns (``TurnView``, in the order of its list) and plain values in, violations
(sentences) out.

- ``runs_never_overlap``: no two turns' runs overlap. A run spans its ``run_started`` to the last
  event of its run id in its turn's stream (its ``run_ended``, or the ``crashed`` one a takeover or
  a Stop writes for it, and a ``turn_ended`` written on its behalf); one never closed spans on
  forever. Stream ids cannot order two turns (their first part is the lease epoch), so the spans
  are compared by the events' ``ts``: each is taken from the clock of the process that made it
  (workers, the runner's lifecycle), all one machine's wall clock, and taken *before* its event is
  appended. A later turn is let through only after the earlier one's ``turn_ended`` was appended,
  which follows every event of its runs, so each ts of the earlier turn precedes the later turn's
  ``run_started`` ts: an overlap is a real one (barring the machine's clock being stepped back). A
  zombie run fenced out by a takeover appends nothing after it, so its span in the ledger ends
  where the takeover ended it; what it still does outside is the per-turn checks' concern.
- ``no_write_twice_across_forks``: a write whose effect happened in a turn happens again only in a
  turn that does not inherit that turn's journal (a new message may repeat it; a fork may not): no
  plain write's effect or ``tool_start`` of a turn a fork inherits (completed or interrupted) is
  repeated in the fork, and an idempotent one repeated there runs with the original key and is not
  applied again.
- ``superseded_only_by_a_later_message`` and ``no_write_after_superseded``: a turn ends
  ``superseded`` only when a fork replaced it or a message sent under ``interrupt`` stopped it, and
  no write of it started after that message's turn was recorded (docs/semantics.md: the Stop flag
  is set before the new message is recorded, and a write's ``tool_start`` lands only while it is
  unset).
- ``context_leaves_out_replaced``: a turn's model sees the conversation's earlier turns, and no turn
  a fork replaced (docs/semantics.md: a turn a fork replaced is no earlier turn of any later one).
- ``forks_recorded``, ``retry_started_nothing``, ``listed_as_sent``: the conversation's list holds
  the turns the trial started and no other, a fork names what it replaces and inherits, and the
  same message id and text again started nothing.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any

from chaos.invariants import IDEMPOTENT_WRITES, PLAIN_WRITES, WRITES
from ledger.codec import Envelope
from ledger.events import RunEnded, RunStarted, ToolStart, TurnContext, TurnStarted

#: the stop code of a turn a new message of its conversation stopped
SUPERSEDED = "superseded"


@dataclass(frozen=True)
class TurnView:
    """One turn of a conversation as the trial ended: its stream, its tools' effect rows, and
    its metadata's status, stop code and ``replaced_by``."""

    turn_id: str
    envelopes: Sequence[Envelope]
    effects: Sequence[dict[str, Any]] = ()
    status: str = ""
    code: str = ""
    replaced_by: str = ""

    @property
    def started(self) -> TurnStarted | None:
        return next((e.event for e in self.envelopes if isinstance(e.event, TurnStarted)), None)


@dataclass(frozen=True)
class Span:
    """A run of a turn, from its ``run_started``'s ts to its last event's (inf: never closed)."""

    turn_id: str
    run_id: str
    start: float
    end: float = math.inf

    def overlaps(self, other: Span) -> bool:
        return self.start < other.end and other.start < self.end


def check(turns: Sequence[TurnView], superseders: Mapping[str, str] | None = None) -> list[str]:
    """Every invariant across the conversation's turns; ``superseders``: turn -> the turn whose
    message stopped it under ``interrupt`` (a fork's replacements are read from the turns)."""
    return [*no_write_twice_across_forks(turns), *other_checks(turns, superseders)]


def other_checks(
    turns: Sequence[TurnView], superseders: Mapping[str, str] | None = None
) -> list[str]:
    """All but ``no_write_twice_across_forks``, which a naive run (no journal, so a fork
    inherits none) is expected to break."""
    by = {**(superseders or {}), **{t.turn_id: t.replaced_by for t in turns if t.replaced_by}}
    return [
        *runs_never_overlap(turns),
        *forks_recorded(turns),
        *context_leaves_out_replaced(turns),
        *superseded_only_by_a_later_message(turns, by),
        *no_write_after_superseded(turns, by),
    ]


# -- one live turn --------------------------------------------------------------------------------


def spans(turn_id: str, envelopes: Sequence[Envelope]) -> list[Span]:
    """The turn's runs in stream order, each to the last ts of its run id after its start."""
    starts: dict[str, float] = {}
    last: dict[str, float] = {}
    closed: set[str] = set()
    for env in envelopes:
        event = env.event
        if isinstance(event, RunStarted):
            starts.setdefault(event.run_id, event.ts)
            last.setdefault(event.run_id, event.ts)
        elif event.run_id in starts:
            last[event.run_id] = max(last[event.run_id], event.ts)
            if isinstance(event, RunEnded):
                closed.add(event.run_id)
    return [
        Span(turn_id, run_id, start, last[run_id] if run_id in closed else math.inf)
        for run_id, start in starts.items()
    ]


def runs_never_overlap(turns: Sequence[TurnView]) -> list[str]:
    """No run of one turn overlaps a run of another turn of the conversation."""
    all_spans = [s for t in turns for s in spans(t.turn_id, t.envelopes)]
    return [
        f"run {a.run_id} of {a.turn_id} ({_when(a)}) overlaps run {b.run_id} of {b.turn_id} "
        f"({_when(b)})"
        for a, b in combinations(all_spans, 2)
        if a.turn_id != b.turn_id and a.overlaps(b)
    ]


def _when(span: Span) -> str:
    end = "never ended" if span.end == math.inf else f"{span.end:.3f}"
    return f"{span.start:.3f} to {end}"


# -- no write twice across a fork ----------------------------------------------------------------


def inherited(turn: TurnView) -> set[str]:
    """The turns whose journal ``turn`` inherits: its ``inherits`` and the turn it forks."""
    started = turn.started
    if started is None:
        return set()
    return {*started.inherits, *([started.fork_of] if started.fork_of else [])}


def no_write_twice_across_forks(turns: Sequence[TurnView]) -> list[str]:
    """In a fork, no plain write of a turn it inherits ran or started again, and an idempotent
    one ran only with that turn's key and was not applied again."""
    views = {t.turn_id: t for t in turns}
    out: list[str] = []
    for fork in turns:
        for turn_id in sorted(inherited(fork)):
            if turn_id in views:
                out += _repeated(views[turn_id], fork)
    return out


def _repeated(earlier: TurnView, fork: TurnView) -> list[str]:
    where = f"in fork {fork.turn_id}, inheriting {earlier.turn_id}"
    out = [
        f"{tool} ran again {where}: {rest}"
        for tool, *rest in sorted(_plain_effects(earlier) & _plain_effects(fork), key=str)
    ]
    out += [
        f"{tool} started again {where} (signature {sig})"
        for tool, sig in sorted(_plain_starts(earlier) & _plain_starts(fork))
    ]
    keys = _charge_keys(earlier.effects)
    for row in fork.effects:
        if row["tool"] not in IDEMPOTENT_WRITES or row["amount"] not in keys:
            continue
        if row["key"] not in keys[row["amount"]]:
            out.append(f"{row['tool']} of {row['amount']} ran with a new key {where}")
        if row.get("applied") and any(r.get("applied") for r in _charges(earlier.effects, row)):
            out.append(f"{row['tool']} of {row['amount']} applied again {where}")
    return out


def _plain_effects(turn: TurnView) -> set[tuple[Any, ...]]:
    return {
        (r["tool"], r.get("to"), r.get("subject"), r.get("text"))
        for r in turn.effects
        if r["tool"] in PLAIN_WRITES
    }


def _plain_starts(turn: TurnView) -> set[tuple[str, str]]:
    return {
        (e.event.tool, e.event.signature)
        for e in turn.envelopes
        if isinstance(e.event, ToolStart) and e.event.tool in PLAIN_WRITES
    }


def _charge_keys(effects: Sequence[dict[str, Any]]) -> dict[Any, set[str]]:
    keys: dict[Any, set[str]] = defaultdict(set)
    for row in effects:
        if row["tool"] in IDEMPOTENT_WRITES:
            keys[row["amount"]].add(row["key"])
    return keys


def _charges(effects: Sequence[dict[str, Any]], like: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in effects if r["tool"] == like["tool"] and r["amount"] == like["amount"]]


def forks_recorded(turns: Sequence[TurnView]) -> list[str]:
    """A fork inherits the turn it forks and each it replaces, and each of those is marked
    ``replaced_by`` it."""
    views = {t.turn_id: t for t in turns}
    out: list[str] = []
    for fork in turns:
        started = fork.started
        if started is None or not started.fork_of:
            continue
        missing = {started.fork_of, *started.replaces} - set(started.inherits)
        out += [f"fork {fork.turn_id} does not inherit {t}" for t in sorted(missing)]
        out += [
            f"{t} is not marked replaced by fork {fork.turn_id}"
            for t in started.replaces
            if t in views and views[t].replaced_by != fork.turn_id
        ]
    return out


def context_leaves_out_replaced(turns: Sequence[TurnView]) -> list[str]:
    """A turn no fork replaced saw as earlier turns those of the conversation before it that no
    fork replaced (the oldest may be left out, past the history budget): a fork that replaced an
    earlier turn replaced every later one, so for a turn still current, a replaced earlier turn
    was replaced before it was let through, or by it. A turn never let through (no ``context``,
    no run) saw nothing to judge."""
    out: list[str] = []
    current: list[str] = []
    for turn in turns:
        if turn.replaced_by:
            continue
        earlier = _earlier_turns(turn)
        seen = [t.turn_id for t in earlier or ()]
        if earlier is not None and (
            seen != current[len(current) - len(seen) :] or (current and not seen)
        ):
            out.append(f"{turn.turn_id} saw {seen} as its earlier turns, not {current}")
        current.append(turn.turn_id)
    return out


def _earlier_turns(turn: TurnView) -> Sequence[Any] | None:
    """The turn's ``context`` (recorded when it was let through), else, for a turn that ran, its
    ``turn_started``'s; None: it was never let through."""
    events = [e.event for e in turn.envelopes]
    context = [e for e in events if isinstance(e, TurnContext)]
    if context:
        return context[-1].earlier_turns
    started = turn.started
    ran = any(isinstance(e, RunStarted) for e in events)
    return started.earlier_turns if started is not None and ran else None


# -- superseded, and nothing written after --------------------------------------------------------


def superseded_only_by_a_later_message(
    turns: Sequence[TurnView], superseders: Mapping[str, str]
) -> list[str]:
    """A turn stopped ``superseded`` was replaced by a fork or interrupted by a new message."""
    return [
        f"{t.turn_id} stopped superseded, but no fork replaced it and no message interrupted it"
        for t in turns
        if t.status == "stopped" and t.code == SUPERSEDED and t.turn_id not in superseders
    ]


def no_write_after_superseded(
    turns: Sequence[TurnView], superseders: Mapping[str, str], writes: Collection[str] = WRITES
) -> list[str]:
    """No write of a turn started after the turn that superseded it was recorded (its
    ``turn_started`` ts; the ts of a ``tool_start`` is taken before its append)."""
    views = {t.turn_id: t for t in turns}
    out: list[str] = []
    for turn_id, by in superseders.items():
        if turn_id not in views or by not in views:
            continue
        started = views[by].started
        if started is None:
            continue
        out += [
            f"{e.event.tool} of {turn_id} started at {e.event.ts:.3f}, after {by} was recorded "
            f"at {started.ts:.3f}"
            for e in views[turn_id].envelopes
            if isinstance(e.event, ToolStart) and e.event.tool in writes
            and e.event.ts > started.ts
        ]  # fmt: skip
    return out


# -- what the list holds ---------------------------------------------------------------------------


def listed_as_sent(listed: Sequence[str], sent: Sequence[str]) -> list[str]:
    """The conversation's list holds the trial's turns, in the order they were sent."""
    if list(listed) == list(sent):
        return []
    return [f"the conversation lists {list(listed)}, the trial sent {list(sent)}"]


def retry_started_nothing(returned: str, first: str, listed: Sequence[str]) -> list[str]:
    """The newest message sent again (same id, same text) returned its turn, recorded nothing."""
    out = []
    if returned != first:
        out.append(f"the same message again returned {returned}, not its turn {first}")
    out += [f"the same message again recorded {t}" for t in listed if t != first]
    return out
