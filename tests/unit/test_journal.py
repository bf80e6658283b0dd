"""The journal is a pure fold over a turn's events (docs/events.md, docs/architecture.md)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.events import (
    Clear,
    Event,
    ModelDone,
    ModelStart,
    Resumed,
    RunEnded,
    RunStarted,
    Text,
    ToolBlocked,
    ToolDone,
    ToolStart,
    TurnStarted,
)
from ledger.journal import Journal, JournalEntry, build_journal
from ledger.signature import input_signature

#: every event of these tests is of one turn, one run, one chunk, at one instant
BASE: dict[str, Any] = {"event_id": "e1", "turn_id": "t1", "run_id": "r1", "chunk": 0, "ts": 1.0}


def start(tool: str, input: Any, *, call_id: str | None = None) -> ToolStart:
    return ToolStart(
        **BASE, call_id=call_id, tool=tool, input=input, signature=input_signature(input)
    )


def done(tool: str, result: Any, *, call_id: str | None = None, is_error: bool = False) -> ToolDone:
    return ToolDone(**BASE, call_id=call_id, tool=tool, result=result, is_error=is_error)


def clear() -> Clear:
    return Clear(**BASE, reason="abandoned partial")


def blocked(tool: str, input: Any, *, call_id: str | None = None) -> ToolBlocked:
    return ToolBlocked(
        **BASE,
        call_id=call_id,
        tool=tool,
        input=input,
        signature=input_signature(input),
        reason="completed",
        result="the journaled result",
    )


def completed(tool: str, input: Any, result: Any, call_id: str | None = None) -> JournalEntry:
    return JournalEntry(
        tool=tool, call_id=call_id, input=input, signature=input_signature(input), result=result
    )


def interrupted(tool: str, input: Any, call_id: str | None = None) -> JournalEntry:
    return JournalEntry(tool=tool, call_id=call_id, input=input, signature=input_signature(input))


def tools(entries: list[JournalEntry]) -> list[tuple[str, Any]]:
    return [(e.tool, e.input) for e in entries]


# --- docs/events.md, rule by rule
# ----------------------------------------------------------------------


def test_a_start_with_a_successful_done_is_completed_with_its_result_input_and_signature() -> None:
    journal = build_journal(
        [
            start("send_email", {"to": "a@x.io"}, call_id="c1"),
            done("send_email", {"id": 7}, call_id="c1"),
        ]
    )
    assert journal.completed == [completed("send_email", {"to": "a@x.io"}, {"id": 7}, "c1")]
    entry = journal.completed[0]
    assert entry.signature == input_signature({"to": "a@x.io"})
    assert journal.interrupted == []


def test_a_start_without_a_done_is_interrupted_and_has_no_result() -> None:
    journal = build_journal([start("send_email", {"to": "a@x.io"}, call_id="c1")])
    assert journal.completed == []
    assert journal.interrupted == [interrupted("send_email", {"to": "a@x.io"}, "c1")]
    assert journal.interrupted[0].result is None


def test_a_done_pairs_by_call_id_even_when_an_older_same_tool_start_is_open() -> None:
    journal = build_journal(
        [
            start("send_email", {"n": 1}, call_id="c1"),
            start("send_email", {"n": 2}, call_id="c2"),
            done("send_email", "second", call_id="c2"),
        ]
    )
    assert journal.completed == [completed("send_email", {"n": 2}, "second", "c2")]
    assert journal.interrupted == [interrupted("send_email", {"n": 1}, "c1")]


def test_dones_without_call_id_pair_fifo_with_the_oldest_open_start_of_their_tool() -> None:
    """Two same-name calls finishing out of order: each done closes the oldest open start."""
    journal = build_journal(
        [
            start("search", {"q": "first"}),
            start("fetch", {"url": "u"}),
            start("search", {"q": "second"}),
            done("search", "r-a"),
            done("search", "r-b"),
        ]
    )
    assert journal.completed == [
        completed("search", {"q": "first"}, "r-a"),
        completed("search", {"q": "second"}, "r-b"),
    ]
    assert journal.interrupted == [interrupted("fetch", {"url": "u"})]


def test_a_done_without_call_id_pairs_fifo_even_with_a_start_that_has_one() -> None:
    journal = build_journal([start("search", {"q": 1}, call_id="c1"), done("search", "r")])
    assert journal.completed == [completed("search", {"q": 1}, "r", "c1")]
    assert journal.interrupted == []


def test_a_done_with_an_unknown_call_id_pairs_with_the_oldest_same_tool_start_without_one() -> None:
    journal = build_journal(
        [
            start("search", {"q": "has-id"}, call_id="c1"),
            start("search", {"q": "no-id-1"}),
            start("search", {"q": "no-id-2"}),
            done("search", "r", call_id="c9"),
        ]
    )
    assert journal.completed == [completed("search", {"q": "no-id-1"}, "r")]
    assert tools(journal.interrupted) == [("search", {"q": "has-id"}), ("search", {"q": "no-id-2"})]


def test_a_done_whose_call_id_matches_nothing_is_ignored_when_its_tool_has_only_other_ids() -> None:
    events: list[Event] = [
        start("search", {"q": 1}, call_id="c1"),
        start("fetch", {"u": 1}),
        done("search", "r", call_id="c9"),
    ]
    journal = build_journal(events)
    assert journal.completed == []
    assert journal.interrupted == [
        interrupted("search", {"q": 1}, "c1"),
        interrupted("fetch", {"u": 1}),
    ]


def test_an_error_done_closes_its_start_as_neither_completed_nor_interrupted() -> None:
    journal = build_journal(
        [
            start("send_email", {"to": "a"}, call_id="c1"),
            done("send_email", "SMTP refused", call_id="c1", is_error=True),
        ]
    )
    assert journal.completed == []
    assert journal.interrupted == []
    assert not journal


def test_an_error_done_without_call_id_closes_the_oldest_open_start_of_its_tool() -> None:
    journal = build_journal(
        [
            start("send_email", {"n": 1}),
            start("send_email", {"n": 2}),
            done("send_email", "boom", is_error=True),
        ]
    )
    assert journal.completed == []
    assert journal.interrupted == [interrupted("send_email", {"n": 2})]


def test_an_orphan_done_with_no_open_start_is_ignored() -> None:
    journal = build_journal(
        [
            done("send_email", "ghost"),
            done("send_email", "ghost", call_id="c1"),
            start("send_email", {"n": 1}, call_id="c2"),
            done("send_email", "ok", call_id="c2"),
            done("send_email", "late duplicate", call_id="c2"),
        ]
    )
    assert journal.completed == [completed("send_email", {"n": 1}, "ok", "c2")]
    assert journal.interrupted == []


def test_an_orphan_done_does_not_close_a_start_recorded_after_it() -> None:
    journal = build_journal([done("search", "early"), start("search", {"q": 1})])
    assert journal.completed == []
    assert journal.interrupted == [interrupted("search", {"q": 1})]


def test_clear_drops_the_open_starts_so_far_but_keeps_completed_entries() -> None:
    journal = build_journal(
        [
            start("send_email", {"n": 1}, call_id="c1"),
            done("send_email", "sent", call_id="c1"),
            start("send_email", {"n": 2}, call_id="c2"),
            clear(),
        ]
    )
    assert journal.completed == [completed("send_email", {"n": 1}, "sent", "c1")]
    assert journal.interrupted == []


def test_starts_after_a_clear_are_counted_again() -> None:
    journal = build_journal(
        [
            start("search", {"q": "abandoned"}),
            clear(),
            start("search", {"q": "fresh"}),
            start("send_email", {"n": 1}),
            done("search", "r"),
        ]
    )
    assert journal.completed == [completed("search", {"q": "fresh"}, "r")]
    assert journal.interrupted == [interrupted("send_email", {"n": 1})]


def test_a_done_after_a_clear_does_not_close_a_cleared_start() -> None:
    journal = build_journal(
        [start("search", {"q": 1}, call_id="c1"), clear(), done("search", "r", call_id="c1")]
    )
    assert not journal


def test_tool_blocked_events_never_enter_the_journal() -> None:
    journal = build_journal(
        [
            start("send_email", {"n": 1}, call_id="c1"),
            done("send_email", "sent", call_id="c1"),
            blocked("send_email", {"n": 1}, call_id="c2"),
            blocked("send_email", {"n": 3}),
        ]
    )
    assert journal.completed == [completed("send_email", {"n": 1}, "sent", "c1")]
    assert journal.interrupted == []


def test_a_blocked_call_does_not_consume_a_following_done() -> None:
    """A tool_blocked is not an open call, so a done after it still closes the real start."""
    journal = build_journal(
        [
            start("send_email", {"n": 1}),
            blocked("send_email", {"n": 1}),
            done("send_email", "sent"),
        ]
    )
    assert journal.completed == [completed("send_email", {"n": 1}, "sent")]


def test_an_empty_turn_gives_an_empty_journal() -> None:
    journal = build_journal([])
    assert journal == Journal()
    assert journal.completed == []
    assert journal.interrupted == []
    assert not journal


def test_a_turn_with_only_model_and_text_events_gives_an_empty_journal() -> None:
    events: list[Event] = [
        TurnStarted(**BASE, conversation_id="c", message="hi"),
        RunStarted(**BASE),
        ModelStart(**BASE, step=0),
        Text(**BASE, text="Thinking…"),
        ModelDone(**BASE, tool_calls=0),
        Resumed(**BASE, cause="next_chunk"),
        RunEnded(**BASE, reason="completed"),
    ]
    journal = build_journal(events)
    assert not journal
    assert journal == Journal()


def test_a_journal_with_an_entry_is_truthy() -> None:
    assert build_journal([start("search", {"q": 1})])
    assert build_journal([start("search", {"q": 1}), done("search", "r")])


def test_completed_and_interrupted_are_listed_in_the_order_of_their_tool_starts() -> None:
    journal = build_journal(
        [
            start("a", {"n": 1}, call_id="a1"),
            start("b", {"n": 2}, call_id="b2"),
            start("c", {"n": 3}, call_id="c3"),
            start("d", {"n": 4}, call_id="d4"),
            start("e", {"n": 5}, call_id="e5"),
            done("e", "e", call_id="e5"),
            done("c", "c", call_id="c3"),
            done("a", "a", call_id="a1"),
        ]
    )
    assert tools(journal.completed) == [("a", {"n": 1}), ("c", {"n": 3}), ("e", {"n": 5})]
    assert tools(journal.interrupted) == [("b", {"n": 2}), ("d", {"n": 4})]


def test_the_fold_is_pure_the_same_events_give_equal_journals() -> None:
    events: list[Event] = [
        start("search", {"q": 1}),
        start("send_email", {"n": 1}, call_id="c1"),
        done("search", "r"),
    ]
    before = list(events)
    assert build_journal(events) == build_journal(events)
    assert events == before


def test_the_fold_accepts_any_iterable_such_as_a_generator() -> None:
    events: list[Event] = [
        start("search", {"q": 1}),
        done("search", "r"),
        start("search", {"q": 2}),
    ]

    def generate() -> Iterator[Event]:
        yield from events

    assert build_journal(generate()) == build_journal(events)
    assert build_journal(iter(events)) == build_journal(tuple(events))


# --- property: build_journal agrees with an independent reference of docs/events.md
# ----------------------

TOOLS = ["search", "send_email", "fetch"]
CALL_IDS = ["c1", "c2", "c3"]


Row = tuple[str, str | None, str, Any]  # (tool, call_id, signature, result)


@dataclass
class ReferenceJournal:
    completed: list[Row]
    interrupted: list[Row]


def reference_journal(events: list[Event]) -> ReferenceJournal:
    """docs/events.md written out the plain way: the open starts keyed by their position in the
    ledger, every candidate list rebuilt from scratch at each done."""
    open_starts: dict[int, ToolStart] = {}  # ledger position -> a still-open tool_start
    closed_ok: dict[int, Row] = {}  # ledger position of a start -> its row, with the result
    for position, event in enumerate(events):
        if isinstance(event, Clear):
            open_starts = {}
        elif isinstance(event, ToolStart):
            open_starts[position] = event
        elif isinstance(event, ToolDone):
            oldest_first = sorted(open_starts.items())
            same_id = [
                p
                for p, s in oldest_first
                if event.call_id is not None and s.call_id == event.call_id
            ]
            if same_id:
                candidates = same_id
            elif event.call_id is None:
                candidates = [p for p, s in oldest_first if s.tool == event.tool]
            else:
                candidates = [
                    p for p, s in oldest_first if s.tool == event.tool and s.call_id is None
                ]
            if not candidates:
                continue  # an orphan done: ignored
            closed = open_starts.pop(candidates[0])
            if not event.is_error:
                closed_ok[candidates[0]] = (
                    closed.tool,
                    closed.call_id,
                    closed.signature,
                    event.result,
                )
    return ReferenceJournal(
        completed=[closed_ok[p] for p in sorted(closed_ok)],
        interrupted=[
            (s.tool, s.call_id, s.signature, None) for _, s in sorted(open_starts.items())
        ],
    )


def rows(entries: list[JournalEntry]) -> list[Row]:
    return [(e.tool, e.call_id, e.signature, e.result) for e in entries]


tool_names = st.sampled_from(TOOLS)
call_ids = st.one_of(st.none(), st.sampled_from(CALL_IDS))
start_steps = st.tuples(st.just("start"), tool_names, call_ids)
done_steps = st.tuples(st.just("done"), tool_names, call_ids, st.booleans())
# starts and dones drawn three times as often as clears and blocks, so that several calls are
# often open at once between two clears, which is where the pairing rules matter
steps = st.one_of(
    start_steps,
    start_steps,
    start_steps,
    done_steps,
    done_steps,
    done_steps,
    st.tuples(st.just("clear")),
    st.tuples(st.just("blocked"), tool_names, call_ids),
)


def to_events(plan: list[tuple[Any, ...]]) -> list[Event]:
    """The events of a plan; each start's input and each done's result is unique to its step,
    so that pairing a done with the wrong start always shows in the comparison."""
    events: list[Event] = []
    for i, step in enumerate(plan):
        kind = step[0]
        if kind == "start":
            _, tool, call_id = step
            events.append(start(tool, {"step": i}, call_id=call_id))
        elif kind == "done":
            _, tool, call_id, is_error = step
            events.append(done(tool, f"result-{i}", call_id=call_id, is_error=is_error))
        elif kind == "clear":
            events.append(clear())
        else:
            _, tool, call_id = step
            events.append(blocked(tool, {"step": i}, call_id=call_id))
    return events


@settings(max_examples=300, deadline=None)
@given(plan=st.lists(steps, max_size=30))
def test_the_journal_matches_an_independent_reference_of_the_pairing_rules(
    plan: list[tuple[Any, ...]],
) -> None:
    events = to_events(plan)
    expected = reference_journal(events)
    journal = build_journal(events)
    assert rows(journal.completed) == expected.completed
    assert rows(journal.interrupted) == expected.interrupted
    assert bool(journal) == bool(expected.completed or expected.interrupted)
