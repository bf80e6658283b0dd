"""What an id a client gives may be (docs/http-api.md, "Errors"): one rule for every edge that
takes one (the HTTP API's paths and bodies, the CLI).

An id (turn, conversation, approval, call, message, schedule, idempotency key) is 1-128 characters
of ``[A-Za-z0-9._:-]``, a tenant at most 64, and never ``.`` or ``..``: those name no resource a
client can reach again (a URL path normalises them away). A stream id (``after``,
``Last-Event-ID``) is exactly ``N-N``: ASCII digits, at most 19 a part, so that each part is a
64-bit number, as Redis requires.

The patterns are written for every regex engine that reads them: Python's ``re`` (``fullmatch``
here: its ``$`` matches before a trailing newline), pydantic-core's Rust engine (no look-around)
and the ECMA dialect of the OpenAPI document, which a fuzzer generates from.
"""

from __future__ import annotations

import re
from typing import TypeGuard

#: characters an id is made of
ID_CHARS = "A-Za-z0-9._:-"
#: the longest id; a tenant's
MAX_ID_CHARS = 128
MAX_TENANT_CHARS = 64


def id_pattern(most: int = MAX_ID_CHARS) -> str:
    """``[A-Za-z0-9._:-]{1,most}`` but ``.`` and ``..``: spelled without look-around (three or
    more characters, or one or two that are not all dots)."""
    some, plain = f"[{ID_CHARS}]", "[A-Za-z0-9_:-]"
    return rf"^(?:{some}{{3,{most}}}|{plain}{some}?|\.{plain})$"


#: an id (turn, conversation, approval, call, message, schedule), as a schema's ``pattern``
ID = id_pattern()
#: a tenant's id
TENANT = id_pattern(MAX_TENANT_CHARS)
#: a stream id, as a schema's ``pattern``
STREAM_ID = r"^[0-9]{1,19}-[0-9]{1,19}$"
#: what a refused id is told (the field's name goes before it)
ID_RULE = f"an id is 1-{MAX_ID_CHARS} characters of [{ID_CHARS}] but '.' and '..'"
TENANT_RULE = f"a tenant is 1-{MAX_TENANT_CHARS} characters of [{ID_CHARS}] but '.' and '..'"
STREAM_ID_RULE = "a stream id is exactly N-N (as each event's SSE id), at most 19 digits a part"

_ID = re.compile(ID)
_TENANT = re.compile(TENANT)
_STREAM_ID = re.compile(STREAM_ID)


def is_id(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and _ID.fullmatch(value) is not None


def is_tenant(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and _TENANT.fullmatch(value) is not None


def is_stream_id(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and _STREAM_ID.fullmatch(value) is not None
