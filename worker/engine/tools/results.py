"""A tool result as it is stored and given to the model (docs/tools.md): JSON, whole up to
``DRES_MAX_RESULT_BYTES`` of its serialised form, past that cut, with a marker the model reads.

Every result of every source (a Python tool, an MCP server, an OpenAPI operation, ``call_agent``,
a reconcile hook) passes here once, in the executor: a 5 MB answer would otherwise be written
to the ledger, read back by every chunk of the turn and sent to the model on every call after
it. The result is serialised once (what the ledger would store) and its length is the check; a
result within the cap is that JSON read back, so the run holds what a resumed run reads.

A cut result is ``{"truncated": true, "original_bytes": N, "content": "…"}``: ``content`` is the
start of the result's JSON text (of the string itself for a string result), cut on a character
boundary so that the marker's own JSON stays within the cap.
"""

from __future__ import annotations

from typing import Any

from pydantic_core import from_json, to_json

#: bytes of a result's JSON kept whole by default (DRES_MAX_RESULT_BYTES)
MAX_RESULT_BYTES = 262_144


def stored_result(value: Any, max_bytes: int = MAX_RESULT_BYTES) -> Any:
    """``value`` as JSON-compatible data, cut to a marker when its JSON exceeds ``max_bytes``."""
    raw = to_json(value, fallback=repr)
    if len(raw) <= max_bytes:
        return from_json(raw)
    text = value.encode() if isinstance(value, str) else raw
    return cut(text, len(raw), max_bytes)


def cut(text: bytes, original: int, max_bytes: int) -> dict[str, Any]:
    """The marker of a result whose JSON took ``original`` bytes, carrying as much of ``text``
    (UTF-8) as fits in ``max_bytes`` of the marker's own JSON."""
    marker: dict[str, Any] = {"truncated": True, "original_bytes": original, "content": ""}
    keep = max_bytes - len(to_json(marker))
    while keep > 0:
        # a character cut in half is dropped; escaping (quotes, backslashes) may grow the
        # text, so it shrinks by what overflowed until the whole fits
        marker["content"] = text[:keep].decode("utf-8", "ignore")
        over = len(to_json(marker)) - max_bytes
        if over <= 0:
            return marker
        keep -= over
    marker["content"] = ""
    return marker
