"""The wire format at the boundary: events <-> Redis stream entry fields.

An entry has one field, ``e``, holding the event's JSON (a stable field set keeps Redis's listpack
delta compression effective). Readers get an ``Envelope``: the stream id beside the event, so the
pydantic events themselves never hold stream ids.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from ledger.errors import EventDecodeError
from ledger.events import Event, parse_event_json

FIELD = "e"
_FIELD_BYTES = FIELD.encode()


def text(value: Any) -> str:
    """A Redis reply as text, whether the client decodes responses or not."""
    return value.decode() if isinstance(value, bytes) else str(value)


class Envelope(NamedTuple):
    stream_id: str
    event: Event


def encode(event: Event) -> bytes:
    """The JSON payload stored in the entry's ``e`` field (``model_dump_json``'s bytes, from the
    serializer itself: the Python wrapper around it costs as much again)."""
    return event.__pydantic_serializer__.to_json(event)


def decode_entry(stream_id: bytes | str, fields: Mapping[bytes | str, bytes | str]) -> Envelope:
    """Decode one XRANGE/XREAD entry; raise ``EventDecodeError`` naming the entry if malformed."""
    sid = stream_id.decode() if isinstance(stream_id, bytes) else stream_id
    raw = fields.get(_FIELD_BYTES)
    if raw is None:
        raw = fields.get(FIELD)
    if raw is None:
        raise EventDecodeError(
            f"entry {sid}: no {FIELD!r} field (fields: {sorted(map(str, fields))})"
        )
    try:
        return Envelope(sid, parse_event_json(raw))
    except EventDecodeError as e:
        raise EventDecodeError(f"entry {sid}: {e}") from e
