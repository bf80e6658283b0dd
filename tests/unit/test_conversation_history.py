"""A turn's model sees its conversation's earlier turns (docs/semantics.md): the fold puts them
before the new message as plain user/assistant pairs, the budget drops the oldest first, and both
providers' request shapes stay valid (roles alternate, tool results follow their calls)."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from factories import base, clear, done, start, text, turn_started

from ledger.events import EarlierTurn, Event, ModelDone, ModelStart, TurnStarted, parse_event
from worker.engine.history import (
    build_messages,
    earlier_answer,
    final_text,
    fit_earlier_turns,
)
from worker.engine.models.base import AssistantMessage, UserMessage
from worker.engine.models.wire import anthropic_messages, openai_messages

ONE = EarlierTurn(turn_id="t-a", message="What is 2+2?", answer="4.")
TWO = EarlierTurn(turn_id="t-b", message="And 3+3?", answer="6.")


def roles(messages: list[dict[str, Any]]) -> list[str]:
    return [m["role"] for m in messages]


def alternate(sequence: list[str]) -> bool:
    return all(a != b for a, b in pairwise(sequence))


def test_earlier_turns_come_before_the_new_message_as_user_and_assistant_pairs() -> None:
    messages = build_messages([turn_started(message="And 4+4?", earlier_turns=(ONE, TWO))])
    assert messages == [
        UserMessage("What is 2+2?"),
        AssistantMessage("4."),
        UserMessage("And 3+3?"),
        AssistantMessage("6."),
        UserMessage("And 4+4?"),
    ]


def test_the_note_of_an_unfinished_turn_still_opens_the_new_message() -> None:
    started = turn_started(message="Try again.", earlier_turns=(ONE,), prior_turn_note="(note)")
    messages = build_messages([started])
    assert messages[:2] == [UserMessage("What is 2+2?"), AssistantMessage("4.")]
    assert messages[2] == UserMessage("(note)\n\nTry again.")


def with_a_tool_call(earlier: tuple[EarlierTurn, ...]) -> list[Event]:
    """A turn after ``earlier`` whose first response calls send_email, then answers."""
    return [
        turn_started(message="Email Ada.", earlier_turns=earlier),
        ModelStart(**base(), step=0),
        text("Sending."),
        start("send_email", {"to": "ada@x.io"}, call_id="c1"),
        done("send_email", {"sent": True}, call_id="c1"),
        ModelDone(**base(), tool_calls=1),
        ModelStart(**base(), step=1),
        text("Sent."),
    ]


def test_both_providers_get_alternating_roles_and_no_earlier_tool_calls() -> None:
    messages = tuple(build_messages(with_a_tool_call((ONE, TWO))))

    anthropic = anthropic_messages(messages)
    assert roles(anthropic) == ["user", "assistant"] * 4
    assert [b["type"] for m in anthropic[:4] for b in m["content"]] == ["text"] * 4
    uses = [b for m in anthropic for b in m["content"] if b["type"] == "tool_use"]
    results = [b for m in anthropic for b in m["content"] if b["type"] == "tool_result"]
    assert [u["id"] for u in uses] == [r["tool_use_id"] for r in results] == ["c1"]

    openai = openai_messages("Be terse.", messages)
    assert roles(openai) == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert [m.get("tool_calls") for m in openai[1:5]] == [None] * 4
    assert openai[7]["tool_call_id"] == openai[6]["tool_calls"][0]["id"] == "c1"
    assert alternate([r for r in roles(openai) if r in {"user", "assistant"}][:5])


def test_over_the_budget_the_oldest_turn_is_dropped_first() -> None:
    three = EarlierTurn(turn_id="t-c", message="x" * 10, answer="y" * 10)
    turns = [ONE, TWO, three]
    size = [len(t.message) + len(t.answer) for t in turns]
    assert fit_earlier_turns(turns, sum(size)) == (ONE, TWO, three)
    assert fit_earlier_turns(turns, sum(size) - 1) == (TWO, three)
    assert fit_earlier_turns(turns, size[1] + size[2]) == (TWO, three)
    assert fit_earlier_turns(turns, size[2]) == (three,)
    assert fit_earlier_turns(turns, 0) == ()


def test_an_older_turn_that_would_fit_is_not_kept_after_a_newer_one_was_dropped() -> None:
    big = EarlierTurn(turn_id="t-big", message="m" * 50, answer="a" * 50)
    assert fit_earlier_turns([ONE, big, TWO], 20) == (TWO,)


def test_the_newest_turn_alone_over_the_budget_is_cut_to_it() -> None:
    big = EarlierTurn(turn_id="t-big", message="m" * 300, answer="a" * 700)
    (cut,) = fit_earlier_turns([ONE, big], 100)
    assert len(cut.message) + len(cut.answer) <= 100
    assert cut.message.startswith("mmm") and cut.answer.startswith("aaa")
    assert cut.message.endswith("…") and cut.answer.endswith("…")


def test_the_final_text_is_the_last_responses_text_after_any_clear() -> None:
    events = with_a_tool_call(())
    assert final_text(events) == "Sent."
    assert final_text([*events, clear(), text("Done.")]) == "Done."
    assert final_text(events[:1]) == ""


def test_an_earlier_answer_is_never_empty_and_says_when_its_turn_did_not_finish() -> None:
    assert earlier_answer("4.", None) == "4."
    assert earlier_answer("", None).strip()
    assert earlier_answer(" \n", None).strip()
    assert earlier_answer(" ", "is still running").startswith("(This request did not finish")
    stopped = earlier_answer("Sending.", "ended as stopped (cancelled)")
    assert stopped.startswith("Sending.") and "did not finish" in stopped
    assert "did not finish" in earlier_answer("", "is still running")


def test_a_turn_started_recorded_before_earlier_turns_existed_still_parses() -> None:
    old = turn_started().model_dump(mode="json")
    del old["earlier_turns"]
    parsed = parse_event(old)
    assert isinstance(parsed, TurnStarted) and parsed.earlier_turns == ()
    new = turn_started(earlier_turns=(ONE, TWO))
    assert parse_event(new.model_dump(mode="json")) == new
