"""A streamed ``text`` event stored compactly (ledger.codec): what its place implies is not
repeated, and every reader still gets the dict form of docs/events.md."""

from __future__ import annotations

import pytest

from ledger.codec import Decoder, decode_entry, encode
from ledger.errors import EventDecodeError
from ledger.events import RunStarted, Text

OPENED = RunStarted(event_id="ev-open", turn_id="t1", run_id="r1", chunk=2, ts=100.0, epoch=3)


def said(value: str, *, ts: float = 100.25, run_id: str = "r1") -> Text:
    return Text(event_id="ev-w", turn_id="t1", run_id=run_id, chunk=2, ts=ts, text=value)


def decoder() -> Decoder:
    found = Decoder("t1")
    found.entry("3-0", {b"e": encode(OPENED)})
    return found


@pytest.mark.parametrize("value", ["tok tok tok tok tok ", "", "{not json} | ünï ✓", "  "])
@pytest.mark.parametrize("after_s", [0.0, 0.031, 0.032, 1.5, 40.0, 1000.0])
def test_a_compact_text_decodes_to_the_dict_form_its_place_implies(
    value: str, after_s: float
) -> None:
    payload = encode(said(value, ts=100.0 + after_s), OPENED)
    assert not payload.startswith(b"{")
    assert len(payload) <= len(value.encode()) + 4  # the offset: 4 bytes up to 17 minutes

    envelope = decoder().entry("3-7", {b"e": payload})

    assert envelope.stream_id == "3-7"
    assert envelope.event.model_dump(mode="json") == {
        "v": 1,
        "type": "text",
        "event_id": "ev-open:7",
        "turn_id": "t1",
        "run_id": "r1",
        "chunk": 2,
        "ts": pytest.approx(100.0 + after_s, abs=0.0005),
        "text": value,
    }


def test_a_client_that_decodes_responses_reads_the_same_event() -> None:
    payload = encode(said("hello"), OPENED)
    as_text = decoder().entry("3-1", {"e": payload.decode()})
    assert as_text == decoder().entry("3-1", {b"e": payload})


def test_text_that_is_not_the_opening_runs_own_is_stored_as_json() -> None:
    for event in (said("x", run_id="r0"), said("x", ts=99.0)):
        assert encode(event, OPENED) == encode(event)
        assert encode(event).startswith(b"{")


def test_a_reader_starting_mid_turn_looks_up_the_epochs_opening_first() -> None:
    entries = [("3-5", {b"e": encode(said("a"), OPENED)}), ("4-0", {b"e": encode(OPENED)})]
    entries.append(("4-1", {b"e": encode(said("b"), OPENED)}))
    fresh = Decoder("t1")
    # epoch 4's opening is read with the rest; epoch 3's came before the read began
    assert fresh.missing(entries) == [3]
    fresh.learn("3-0", {b"e": encode(OPENED)})
    assert fresh.missing(entries) == []
    texts = [fresh.entry(sid, fields).event for sid, fields in entries]
    assert [(e.event_id, e.type) for e in texts] == [
        ("ev-open:5", "text"),
        ("ev-open", "run_started"),
        ("ev-open:1", "text"),
    ]


def test_a_compact_text_without_its_run_started_is_malformed() -> None:
    payload = {b"e": encode(said("orphan"), OPENED)}
    with pytest.raises(EventDecodeError, match=r"3-4.*run_started"):
        Decoder("t1").entry("3-4", payload)
    with pytest.raises(EventDecodeError):
        decode_entry("3-4", payload)  # an entry read on its own has no context
    opened_by_something_else = Decoder("t1")
    opened_by_something_else.learn("3-0", {b"e": encode(said("not an opening"))})
    with pytest.raises(EventDecodeError):
        opened_by_something_else.entry("3-4", payload)


@pytest.mark.parametrize("raw", [b"AB", b"", b"\xff\xfe", b"}x"])
def test_a_garbled_payload_is_malformed_not_a_crash(raw: bytes) -> None:
    with pytest.raises(EventDecodeError):
        decoder().entry("3-2", {b"e": raw})
