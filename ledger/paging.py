"""Pages of a listing across turns (docs/http-api.md: approvals, conversations), newest first.

A listing is a sorted set scored by a time in ms. A page reads it from the top down; its cursor
is the last listed ``(score, member)``, and the next page starts just below it. Members of one
score come in reverse member order, so the cursor's own score is read again and the members at
or above its member are passed over: none is repeated or missed when many share a score. The
reader's ``keep`` checks the rows read against what they list and drops on the way those whose
subject is gone, so a page may read the index more than once to fill up.

A cursor travels as text, ``<score>:<member>`` (the API's ``next_cursor``); ``decode_cursor``
refuses anything else with ``BadCursor`` before it reaches ``int()`` or Redis.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from ledger.codec import text
from ledger.errors import BadCursor
from ledger.store import Client

#: (score in ms, member): where a page of a listing ends
Cursor = tuple[int, str]
#: a member of the index and its score, as read
Row = tuple[str, int]
#: digits a cursor's score may have: a time in ms has 13, and no more reach ``int()``
CURSOR_DIGITS = 20
#: a cursor's text form, for a schema to state (the API's query parameter): ``decode_cursor``'s
CURSOR_PATTERN = rf"^([0-9]{{1,{CURSOR_DIGITS}}}):(.+)$"
_CURSOR = re.compile(CURSOR_PATTERN)
T = TypeVar("T")


def encode_cursor(cursor: Cursor) -> str:
    return f"{cursor[0]}:{cursor[1]}"


def decode_cursor(raw: str) -> Cursor:
    """A page's ``next_cursor`` as the pager reads it; ``BadCursor`` when it is not one."""
    found = _CURSOR.fullmatch(raw)
    if found is None:
        raise BadCursor(raw)
    return int(found[1]), found[2]


def _checked(cursor: Cursor | str) -> Cursor:
    if isinstance(cursor, str):
        return decode_cursor(cursor)
    score, member = cursor
    if not 0 <= score < 10**CURSOR_DIGITS:
        # said without the digits: Python refuses to write out an int past 4,300 of them
        raise BadCursor(f"<a score of {score.bit_length()} bits>:{member}")
    if not member:
        raise BadCursor(f"{score}:")
    return cursor


def read_page(
    client: Client,
    index: str,
    keep: Callable[[list[Row]], Iterable[tuple[str, int, T]]],
    *,
    limit: int,
    cursor: Cursor | str | None,
) -> tuple[list[T], Cursor | None]:
    """A page of at most ``limit`` of the listing ``index`` after ``cursor`` (a previous page's,
    as the pair or its text), newest first, and the next page's cursor or None. ``keep`` gets
    the rows read, in order, and gives back those listed, each as ``(member, score, item)``."""
    found: list[T] = []
    after = None if cursor is None else _checked(cursor)
    while True:
        top: Any = "+inf" if after is None else after[0]
        # the members of the cursor's own score that were on the pages before
        skip = 0 if after is None else int(client.zcount(index, top, top))
        want = limit - len(found) + 1  # one more than the page: is there a next one?
        got: Any = client.zrevrangebyscore(
            index, top, "-inf", start=0, num=want + skip, withscores=True
        )
        rows = [(text(member), int(score)) for member, score in got]
        if after is not None:
            rows = [(m, s) for m, s in rows if s < after[0] or m < after[1]]
        for member, score, item in keep(rows):
            if len(found) == limit:
                return found, after
            found.append(item)
            after = (score, member)
        if len(got) < want + skip or not rows:
            return found, None
        after = (rows[-1][1], rows[-1][0])
