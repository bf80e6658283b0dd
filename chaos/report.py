"""The chaos runner's results: what one trial found, and the tables ``chaos/RESULTS.md`` shows.

Both tables list the faults in one order (sorted by name), one row per fault, so that the table
of a dres run and the table of a naive run of the same trials and seed stand side by side.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from chaos.takeovers import Takeovers


@dataclass
class TurnResult:
    """One turn of a trial, as it ended."""

    status: str
    code: str
    can_continue: bool
    continues: int
    #: it had not ended when the trial's bound ran out
    timed_out: bool
    #: extra executions of plain writes + extra applications of the idempotent charge
    duplicates: int


@dataclass
class Outcome:
    fault: str
    turns: list[TurnResult]
    seconds: float
    #: the fault really happened (its point was reached) during the trial
    fired: bool
    #: broken invariants (in a naive run: all but the duplicate-effect ones)
    violations: list[str] = field(default_factory=list)
    #: the duplicate-effect invariants a naive run broke (empty in a dres run: those are
    #: ``violations`` there)
    duplicate_notes: list[str] = field(default_factory=list)
    #: an approval trial's decisions, by decision (``approve``, ``deny``)
    decisions: Counter[str] = field(default_factory=Counter)
    #: a conversation trial's counts (``chaos.conversations.counts``): when and how its second
    #: message was sent, turns superseded, calls answered from an inherited journal
    line: Counter[str] = field(default_factory=Counter)
    #: runs started to take a turn over, in the trial's turns (judged after the trial)
    taken: int = 0
    takeovers: Takeovers = field(default_factory=lambda: Takeovers(0, 0, 0))
    #: a tenant trial's bound (0: not one), and whether a tenant had that many running at once
    limit: int = 0
    reached: bool = False
    #: slots a crash left behind that a reaper's mend gave back (the workers' log says so)
    mended: int = 0
    #: what to read when an invariant broke (a tenant trial's runs), printed under it
    details: list[str] = field(default_factory=list)
    #: a timer trial's wakes: seconds each came after its ``wake_at``, and whether the trial's
    #: fault explains lateness (``chaos.timers.explains_lateness``)
    late: list[float] = field(default_factory=list)
    late_explained: bool = False
    #: runs of a timer trial's turns begun before their wait's time that waited again
    waited_again: int = 0

    @property
    def ending(self) -> list[TurnResult]:
        """The turns whose end is the trial's: all of them, but in a conversation trial its
        newest (the one that answers; an earlier one may end superseded, not continuable)."""
        return self.turns[-1:] if self.line else self.turns

    @property
    def status(self) -> str:
        """The trial's end: its first turn that did not complete, else ``completed``."""
        first = next((t for t in self.ending if t.status != "completed"), self.ending[0])
        return f"{first.status} (timed out)" if first.timed_out else first.status

    @property
    def can_continue(self) -> bool:
        return all(t.can_continue for t in self.ending if t.status == "stopped")

    @property
    def continues(self) -> int:
        return sum(t.continues for t in self.turns)

    @property
    def duplicates(self) -> int:
        return sum(t.duplicates for t in self.turns)


#: a tenant trial's column: a tenant had its bound's worth of turns running at once
REACHED = "tenant at its bound"
#: the columns that count trials among those of a row, not the row's trials themselves
COUNTED = frozenset({"violations", "fired", "continued", REACHED})


def table(outcomes: Sequence[Outcome]) -> str:
    """Per fault: trials, how they ended, how many broke an invariant."""
    rows: dict[str, Counter[str]] = defaultdict(Counter)
    for o in outcomes:
        stopped = o.status == "stopped" and o.can_continue
        ended = "stopped, can continue" if stopped else o.status
        rows[o.fault][ended] += 1
        rows[o.fault]["fired"] += o.fired
        rows[o.fault]["continued"] += bool(o.continues)
        rows[o.fault]["violations"] += bool(o.violations)
        if o.limit:
            rows[o.fault][REACHED] += o.reached
    columns = ["fired", "completed", "continued", "stopped, can continue", "violations"]
    others = sorted({k for c in rows.values() for k in c} - set(columns))
    lines = [["fault", "trials", *columns, *others]]
    for fault in sorted(rows):
        counts = rows[fault]
        trials = sum(v for k, v in counts.items() if k not in COUNTED)
        lines.append([fault, str(trials), *(str(counts[c]) for c in [*columns, *others])])
    return render(lines)


def naive_table(outcomes: Sequence[Outcome]) -> str:
    """Per fault: the duplicate effects naive resume caused, and in how many trials."""
    rows: dict[str, Counter[str]] = defaultdict(Counter)
    for o in outcomes:
        rows[o.fault]["trials"] += 1
        rows[o.fault]["duplicates"] += o.duplicates
        rows[o.fault]["with"] += bool(o.duplicates)
    lines = [["fault", "trials", "duplicate effects", "trials with a duplicate"]]
    for fault in sorted(rows):
        counts = rows[fault]
        lines.append([fault, *(str(counts[c]) for c in ("trials", "duplicates", "with"))])
    total = Counter[str]()
    for counts in rows.values():
        total.update(counts)
    lines.append(["all", *(str(total[c]) for c in ("trials", "duplicates", "with"))])
    return render(lines)


def render(lines: list[list[str]]) -> str:
    """Columns padded to their widest cell, a rule under the header."""
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    out = [
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in lines
    ]
    out.insert(1, "-" * len(out[0]))
    return "\n".join(out)
