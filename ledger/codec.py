r"""The wire format at the boundary: events <-> Redis stream entry fields.

An entry has one field, ``e`` (a stable field set keeps Redis's listpack delta compression
effective), holding either

- the event's JSON (always an object: its first byte is ``{``), or
- a *compact text*: a ``text`` event of the run that holds the entry's epoch, stored as
  ``<ms><text>``, ``<ms>`` being its ``ts`` in whole milliseconds after its run's
  ``run_started``, written self-delimiting in base 32: every digit but the last is a character of
  ``@A..Z[\]^_`` (0x40-0x5F), the last one of `` !"..?`` (0x20-0x3F), most significant first —
  so never ``{``, and 3 characters up to 32 s after the run's start, 4 up to 17 min. Streamed
  text is most of a turn's entries, and its JSON envelope was ten times its text; a stream entry
  costs Redis ~16 B of its own, and a decimal offset with a separator (6-7 B) would have left a
  20-byte text (50 ms of 100 tokens/s) above 2 B stored per byte. What the entry's place
  already says is not repeated. Its
  ``turn_id`` is the stream's, its ``run_id`` and ``chunk`` are those of the ``run_started`` at
  stream id ``E-0`` of its epoch E (every claim writes one there, ``lua/claim.lua``), its
  ``event_id`` is that ``run_started``'s event id and the entry's sequence (``<id>:<n>``: unique,
  as event ids are, even in a turn created again under the same id) and its ``ts`` is the
  ``run_started``'s plus the offset. A writer encodes a ``text`` event compactly only under a
  lease that knows its ``run_started`` (``encode(event, opened)``) and only when the event is
  that run's; every other event, and every event a transition writes, is JSON.

Decoding a compact text needs its epoch's ``run_started``: a ``Decoder`` (one per turn read)
remembers those it decodes, and names the epochs it has not seen (``missing``) for the reader to
look up at ``E-0`` (``learn``) before decoding — a reader that starts mid-turn (``Last-Event-ID``,
a page) meets text whose ``run_started`` came earlier. A compact text whose ``run_started`` cannot
be found is malformed: ``EventDecodeError``, which readers log and skip (docs/events.md).

Readers get an ``Envelope``: the stream id beside the event, so the pydantic events themselves
never hold stream ids.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from contextlib import suppress
from typing import Any, NamedTuple

from ledger.errors import EventDecodeError
from ledger.events import Event, RunStarted, Text, parse_event_json

FIELD = "e"
_FIELD_BYTES = FIELD.encode()
#: the first byte of every JSON payload; a compact text never starts with it
_JSON = ord("{")
#: a compact text's offset: base-32 digits, ``_MORE + d`` before the last, ``_LAST + d`` for it
_MORE, _LAST = 0x40, 0x20

Fields = Mapping[bytes | str, bytes | str]


def text(value: Any) -> str:
    """A Redis reply as text, whether the client decodes responses or not."""
    return value.decode() if isinstance(value, bytes) else str(value)


class Envelope(NamedTuple):
    stream_id: str
    event: Event


def encode(event: Event, opened: RunStarted | None = None) -> bytes:
    """The payload stored in the entry's ``e`` field.

    JSON (``model_dump_json``'s bytes, from the serializer itself: the Python wrapper around it
    costs as much again), or a compact text when ``opened`` — the ``run_started`` at ``E-0`` of
    the epoch the entry goes to — implies the event's ``turn_id``, ``run_id`` and ``chunk``.
    """
    if opened is not None and isinstance(event, Text) and _implied(event, opened):
        return _offset(round((event.ts - opened.ts) * 1000)) + event.text.encode()
    return event.__pydantic_serializer__.to_json(event)


def _offset(ms: int) -> bytes:
    digits = [_LAST + (ms & 31)]
    ms >>= 5
    while ms:
        digits.append(_MORE + (ms & 31))
        ms >>= 5
    return bytes(reversed(digits))


def _implied(event: Text, opened: RunStarted) -> bool:
    return (
        event.turn_id == opened.turn_id
        and event.run_id == opened.run_id
        and event.chunk == opened.chunk
        and math.isfinite(event.ts)
        and event.ts >= opened.ts
    )


def payload(stream_id: str, fields: Fields) -> bytes | str:
    """The entry's ``e`` field; ``EventDecodeError`` naming the entry when it has none."""
    raw = fields.get(_FIELD_BYTES)
    if raw is None:
        raw = fields.get(FIELD)
    if raw is None:
        raise EventDecodeError(
            f"entry {stream_id}: no {FIELD!r} field (fields: {sorted(map(str, fields))})"
        )
    return raw


def same_payload(fields: Fields, expected: bytes) -> bool:
    """The entry holds exactly ``expected`` (whether the client decodes responses or not)."""
    raw = fields.get(_FIELD_BYTES, fields.get(FIELD))
    return (raw.encode() if isinstance(raw, str) else raw) == expected


def _is_json(raw: bytes | str) -> bool:
    return (raw[0] if isinstance(raw, bytes) else ord(raw[0])) == _JSON if raw else True


def _opening(stream_id: bytes | str) -> bool:
    """The id is an epoch's first, ``E-0`` (where a claim writes its ``run_started``)."""
    if isinstance(stream_id, bytes):
        return stream_id.endswith(b"-0")
    return stream_id.endswith("-0")


def _position(stream_id: str) -> tuple[int, int]:
    epoch, _, seq = stream_id.partition("-")
    try:
        return int(epoch), int(seq)
    except ValueError:
        raise EventDecodeError(f"entry {stream_id}: not a stream id") from None


class Decoder:
    """Decodes one turn's entries in stream order, remembering each epoch's ``run_started``."""

    def __init__(self, turn_id: str) -> None:
        self.turn_id = turn_id
        #: epoch -> the ``run_started`` at its ``E-0``
        self.opened: dict[int, RunStarted] = {}

    def missing(self, entries: Iterable[tuple[Any, Fields]]) -> list[int]:
        """The epochs whose ``run_started`` must be looked up (``learn``) before ``entries``
        decode: those of their compact texts, neither remembered nor among ``entries``."""
        known = set(self.opened)
        wanted: list[int] = []
        for stream_id, fields in entries:
            raw = fields.get(_FIELD_BYTES)
            if raw is None:
                raw = fields.get(FIELD)
            # most entries are JSON events past their epoch's opening: no id to parse for them
            if raw is None or (_is_json(raw) and not _opening(stream_id)):
                continue
            try:
                epoch = _position(text(stream_id))[0]
            except EventDecodeError:
                continue
            if epoch in known:
                continue
            if not _is_json(raw):
                wanted.append(epoch)
            known.add(epoch)  # looked up, or its opening is read with the rest
        return wanted

    def learn(self, stream_id: Any, fields: Fields) -> None:
        """Remember the entry at ``E-0`` looked up for ``missing``; one that is no
        ``run_started`` leaves its epoch's compact texts malformed."""
        with suppress(EventDecodeError):
            self.entry(stream_id, fields)

    def entry(self, stream_id: bytes | str, fields: Fields) -> Envelope:
        """Decode one XRANGE/XREAD entry; raise ``EventDecodeError`` naming it if malformed."""
        sid = text(stream_id)
        raw = payload(sid, fields)
        if not _is_json(raw):
            return Envelope(sid, self._compact(sid, raw))
        try:
            event = parse_event_json(raw)
        except EventDecodeError as e:
            raise EventDecodeError(f"entry {sid}: {e}") from e
        if isinstance(event, RunStarted) and sid.endswith("-0"):
            self.opened[_position(sid)[0]] = event
        return Envelope(sid, event)

    def _compact(self, sid: str, raw: bytes | str) -> Text:
        epoch, seq = _position(sid)
        opened = self.opened.get(epoch)
        if opened is None:
            raise EventDecodeError(
                f"entry {sid}: compact text whose run_started ({epoch}-0) is missing"
            )
        try:
            body = raw.decode() if isinstance(raw, bytes) else raw
        except UnicodeDecodeError as e:
            raise EventDecodeError(f"entry {sid}: malformed compact text: {e}") from None
        ms, i = 0, 0
        while i < len(body) and _MORE <= ord(body[i]) < _MORE + 32:
            ms, i = ms * 32 + ord(body[i]) - _MORE, i + 1
        if i == len(body) or not _LAST <= ord(body[i]) < _LAST + 32:
            raise EventDecodeError(f"entry {sid}: malformed compact text (no offset)")
        ms, value = ms * 32 + ord(body[i]) - _LAST, body[i + 1 :]
        ts = round(opened.ts + ms / 1000, 6)
        return Text(
            event_id=f"{opened.event_id}:{seq}",
            turn_id=opened.turn_id,
            run_id=opened.run_id,
            chunk=opened.chunk,
            ts=ts,
            text=value,
        )


def decode_entry(stream_id: bytes | str, fields: Fields) -> Envelope:
    """Decode one entry read on its own (a turn's ``turn_started``, an epoch's opening): a
    compact text there has no ``run_started`` to complete it and raises ``EventDecodeError``."""
    return Decoder("").entry(stream_id, fields)


def decode_one(entries: Any) -> Event | None:
    """The event of a read of one stream id (``decode_entry``); None when it found no entry,
    or an unreadable one."""
    if not entries:
        return None
    try:
        return decode_entry(entries[0][0], entries[0][1]).event
    except EventDecodeError:
        return None
