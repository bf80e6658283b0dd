"""The journal note of a resume prompt (docs/semantics.md, layer 1)."""

from __future__ import annotations

from typing import Any

from ledger.journal import Journal, JournalEntry
from ledger.note import (
    COMPLETED_HEADER,
    INPUT_CHARS,
    INTERRUPTED_HEADER,
    RESULT_CHARS,
    journal_note,
)
from ledger.signature import input_signature


def entry(tool: str, input: Any, result: Any = None, *, call_id: str | None = None) -> JournalEntry:
    return JournalEntry(
        tool=tool, call_id=call_id, input=input, signature=input_signature(input), result=result
    )


def note_of(
    completed: list[JournalEntry] | None = None, interrupted: list[JournalEntry] | None = None
) -> str:
    note = journal_note(Journal(completed=completed or [], interrupted=interrupted or []))
    assert note is not None
    return note


def entry_lines(note: str, tool: str) -> list[str]:
    return [line for line in note.splitlines() if line.startswith(f"- {tool}")]


def test_an_empty_journal_has_no_note() -> None:
    assert journal_note(Journal()) is None


def test_a_completed_only_journal_has_the_completed_section_and_no_interrupted_one() -> None:
    note = note_of(completed=[entry("send_email", {"to": "a@x.io"}, {"id": 7})])
    assert COMPLETED_HEADER in note
    assert INTERRUPTED_HEADER not in note


def test_an_interrupted_only_journal_has_the_interrupted_section_and_no_completed_one() -> None:
    note = note_of(interrupted=[entry("send_email", {"to": "a@x.io"})])
    assert INTERRUPTED_HEADER in note
    assert COMPLETED_HEADER not in note


def test_both_sections_appear_completed_before_interrupted() -> None:
    note = note_of(
        completed=[entry("send_email", {"to": "a@x.io"}, "sent")],
        interrupted=[entry("charge_card", {"amount": 5})],
    )
    assert note.index(COMPLETED_HEADER) < note.index("- send_email")
    assert note.index("- send_email") < note.index(INTERRUPTED_HEADER)
    assert note.index(INTERRUPTED_HEADER) < note.index("- charge_card")


def test_entries_are_listed_in_journal_order_one_line_each() -> None:
    note = note_of(
        completed=[entry("first", {"n": 1}, "r1"), entry("second", {"n": 2}, "r2")],
        interrupted=[entry("third", {"n": 3}), entry("fourth", {"n": 4})],
    )
    positions = [note.index(f"- {tool}") for tool in ("first", "second", "third", "fourth")]
    assert positions == sorted(positions)
    assert all(len(entry_lines(note, tool)) == 1 for tool in ("first", "second", "third", "fourth"))


def test_a_completed_entry_line_names_its_tool_input_and_result() -> None:
    note = note_of(completed=[entry("send_email", {"to": "a@x.io"}, "message 42 queued")])
    [line] = entry_lines(note, "send_email")
    assert "send_email" in line
    assert '{"to":"a@x.io"}' in line
    assert "message 42 queued" in line


def test_an_interrupted_entry_line_names_its_tool_and_input_and_shows_no_result() -> None:
    note = note_of(interrupted=[entry("charge_card", {"amount": 5}, "must not show")])
    [line] = entry_lines(note, "charge_card")
    assert '{"amount":5}' in line
    assert "must not show" not in line
    assert "→" not in line


def test_a_long_input_is_cut_to_about_input_chars_with_an_ellipsis() -> None:
    long_input = {"body": "x" * 1000}
    note = note_of(interrupted=[entry("send_email", long_input)])
    [line] = entry_lines(note, "send_email")
    assert "…" in line
    shown = line.split("input: ", 1)[1]
    assert INPUT_CHARS <= len(shown) <= INPUT_CHARS + 1
    assert shown.startswith('{"body":"xxx')


def test_a_long_result_is_cut_to_about_result_chars_with_an_ellipsis() -> None:
    note = note_of(completed=[entry("fetch", {"url": "u"}, "y" * 5000)])
    [line] = entry_lines(note, "fetch")
    shown = line.split("→ ", 1)[1]
    assert shown.endswith("…")
    assert RESULT_CHARS <= len(shown) <= RESULT_CHARS + 1
    assert set(shown[:-1]) == {"y"}


def test_short_inputs_and_results_are_shown_whole() -> None:
    note = note_of(completed=[entry("fetch", {"url": "u"}, "z" * RESULT_CHARS)])
    [line] = entry_lines(note, "fetch")
    assert "…" not in line
    assert line.endswith("z" * RESULT_CHARS)


def test_runs_of_whitespace_collapse_to_single_spaces() -> None:
    note = note_of(
        completed=[entry("send_email", {"body": "a\n\n\tb   c"}, "line one\n\n  line\ttwo\r\n")]
    )
    [line] = entry_lines(note, "send_email")
    assert "line one line two" in line
    assert "\t" not in note
    assert "  " not in line
    # the input's newline and tab are JSON escapes, so its one run of real spaces is what collapses
    assert "b c" in line


def test_a_dict_result_is_shown_as_compact_json() -> None:
    note = note_of(completed=[entry("get_ticket", {"id": "T-1"}, {"status": "open", "id": "T-1"})])
    [line] = entry_lines(note, "get_ticket")
    assert '{"id":"T-1","status":"open"}' in line
