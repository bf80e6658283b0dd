"""The journal and the conversation are folds fed in steps: a fold fed a turn in two parts, with a
copy taken in between, equals the fold of the whole turn, and the copy never changes what it was
copied from. The process cache relies on both to fold only a turn's new events (test_cache)."""

from __future__ import annotations

from typing import Any

from factories import base, blocked, clear, done, start, text, turn_started
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.events import Event, ModelDone, ModelStart, Resumed, RunEnded, RunStarted
from ledger.journal import build_journal
from ledger.note import NoteFold, journal_note
from worker.engine.history import (
    INTERRUPTED_RESULT,
    NUDGE,
    Conversation,
    build_messages,
)
from worker.engine.models.base import AssistantMessage, ToolResultMessage, UserMessage

TOOLS = ("send_email", "charge_card")
CALL_IDS = ("c1", "c2", "c3")


call_ids = st.one_of(st.none(), st.sampled_from(CALL_IDS))
steps = st.one_of(
    st.tuples(st.just("model_start")),
    st.tuples(st.just("model_done")),
    st.tuples(st.just("resumed"), st.one_of(st.none(), st.just("a note"))),
    st.tuples(st.just("text"), st.sampled_from(["Hel", "lo", " "])),
    st.tuples(st.just("clear")),
    st.tuples(st.just("start"), st.sampled_from(TOOLS), call_ids),
    st.tuples(st.just("done"), st.sampled_from(TOOLS), call_ids, st.booleans()),
    st.tuples(st.just("blocked"), st.sampled_from(TOOLS), call_ids),
    st.tuples(st.just("run")),
)


def to_events(plan: list[tuple[Any, ...]]) -> list[Event]:
    """The plan as a turn after its ``turn_started``; inputs and results unique per step."""
    events: list[Event] = [turn_started()]
    step = resume_step = 0
    for i, (kind, *args) in enumerate(plan):
        if kind == "model_start":
            events.append(ModelStart(**base(), step=step, resume_step=resume_step))
        elif kind == "model_done":
            events.append(ModelDone(**base()))
            step, resume_step = step + 1, resume_step + 1
        elif kind == "resumed":
            events.append(Resumed(**base(), cause="next_chunk", note=args[0]))
            resume_step = 0
        elif kind == "text":
            events.append(text(args[0]))
        elif kind == "clear":
            events.append(clear())
        elif kind == "start":
            events.append(start(args[0], {"step": i}, call_id=args[1]))
        elif kind == "done":
            events.append(done(args[0], {"result": i}, call_id=args[1], is_error=args[2]))
        elif kind == "blocked":
            events.append(blocked(args[0], {"step": i}, call_id=args[1]))
        else:
            events.append(RunEnded(**base(), reason="soft_limit"))
            events.append(RunStarted(**base(), cause="next_chunk"))
    return events


def state(c: Conversation) -> tuple[Any, ...]:
    return (c.messages(), c.step, c.resume_step, c.prior_attempts)


@settings(max_examples=300, deadline=None)
@given(plan=st.lists(steps, max_size=40), data=st.data())
def test_a_conversation_fed_in_two_parts_through_a_copy_equals_the_whole(
    plan: list[tuple[Any, ...]], data: st.DataObject
) -> None:
    events = to_events(plan)
    cut = data.draw(st.integers(0, len(events)), label="cut")
    first = Conversation().feed(events[:cut])
    before = state(first)  # its messages made (and closed responses' kept) before the copy

    continued = first.copy().feed(events[cut:])

    assert state(continued) == state(Conversation().feed(events))
    assert state(first) == before  # the copy fed the rest; the original did not move
    assert state(first) == state(Conversation().feed(events[:cut]))


@settings(max_examples=300, deadline=None)
@given(plan=st.lists(steps, max_size=40), data=st.data())
def test_a_journal_fed_in_two_parts_through_a_copy_equals_the_whole(
    plan: list[tuple[Any, ...]], data: st.DataObject
) -> None:
    events = to_events(plan)
    cut = data.draw(st.integers(0, len(events)), label="cut")
    first = NoteFold().feed(events[:cut])
    early_note = first.note()  # lines made before the copy

    continued = first.copy().feed(events[cut:])

    assert continued.journal() == build_journal(events)
    assert first.journal() == build_journal(events[:cut])
    # the lines made for the first part serve the whole, and make the same note
    assert continued.note() == journal_note(build_journal(events))
    assert first.note() == early_note


def test_text_streamed_after_the_copy_goes_to_the_copy_only() -> None:
    events: list[Event] = [turn_started(), ModelStart(**base(), step=0), text("Hel")]
    original = Conversation().feed(events)

    twin = original.copy().feed([text("lo"), clear(), text("Bye")])

    assert twin.messages()[-1] == AssistantMessage("Bye", ())
    assert original.messages()[-1] == AssistantMessage("Hel", ())


def test_the_response_being_built_shows_what_it_has_so_far_each_time() -> None:
    conversation = Conversation().feed([turn_started(), ModelStart(**base(), step=0), text("Hel")])
    assert conversation.messages()[-1] == AssistantMessage("Hel", ())

    conversation.feed([text("lo"), start("send_email", {"to": "a"}, call_id="c1")])

    [_, response, _] = conversation.messages()
    assert response.text == "Hello"
    assert [call.call_id for call in response.tool_calls] == ["c1"]


def test_a_call_without_a_result_is_marked_interrupted_until_its_result_comes() -> None:
    events: list[Event] = [
        turn_started(message="send it"),
        ModelStart(**base(), step=0),
        start("send_email", {"to": "a"}, call_id="c1"),
        Resumed(**base(), cause="next_chunk", note=None),
    ]
    conversation = Conversation().feed(events)
    [_, _, interrupted, nudge] = conversation.messages()
    assert interrupted == ToolResultMessage("c1", "send_email", INTERRUPTED_RESULT, True)
    assert nudge == UserMessage(NUDGE)

    conversation.feed([done("send_email", "sent", call_id="c1")])  # a late reconcile, say

    assert conversation.messages()[2] == ToolResultMessage("c1", "send_email", "sent", False)
    assert build_messages([*events, done("send_email", "sent", call_id="c1")]) == (
        conversation.messages()
    )


def test_the_step_counters_follow_model_calls_and_resumes() -> None:
    events: list[Event] = [
        turn_started(),
        ModelStart(**base(), step=0),
        ModelDone(**base()),
        ModelStart(**base(), step=1, resume_step=1),
        Resumed(**base(), cause="next_chunk"),
        ModelStart(**base(), step=1, resume_step=0),
        ModelDone(**base()),
    ]

    conversation = Conversation().feed(events)

    assert (conversation.step, conversation.resume_step) == (2, 1)
    assert conversation.prior_attempts == {(0, 0), (1, 1), (1, 0)}


def test_a_completed_calls_note_line_is_made_once_for_a_builder_and_its_copies() -> None:
    fold = NoteFold().feed(
        [start("send_email", {"to": "a"}, call_id="c1"), done("send_email", "sent", call_id="c1")]
    )
    fold.note()
    [(entry, line)] = fold.kept_lines()
    twin = fold.copy().feed([start("charge_card", {"amount": 5}, call_id="c2")])

    note = twin.note()

    assert note is not None and line in note and "charge_card" in note
    assert twin.kept_lines() == [(entry, line)]  # interrupted calls' lines are not kept
