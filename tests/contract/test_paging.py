"""The one pager of the listings across turns (``ledger.paging``) on fakeredis and a real
redis-server: approvals and conversations page newest first by their text cursor (the API's
``next_cursor``), and a cursor that is no page's is refused with ``BadCursor`` by both."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
from factories import turn_started
from harness import Harness

from ledger.errors import BadCursor, LedgerError
from ledger.paging import CURSOR_DIGITS, Cursor, Row, decode_cursor, encode_cursor, read_page
from ledger.store import Client, Ledger
from ledger.turns import TurnStore
from worker.base.settings import load_settings

SEND = {
    "text": "Sending.",
    "tool_calls": [{"name": "send_email", "input": {"to": "a@b.io", "subject": "s", "body": "b"}}],
}
INDEX = "test:paging"

#: (a cursor's text, why it is refused)
BAD_CURSORS = [
    pytest.param("9" * 5000 + ":x", id="5000-digit-score"),
    pytest.param("1" * (CURSOR_DIGITS + 1) + ":x", id="21-digit-score"),
    pytest.param("not-a-cursor", id="no-colon"),
    pytest.param(":x", id="no-score"),
    pytest.param("12:", id="no-member"),
    pytest.param("-1:x", id="negative"),
    pytest.param("1e5:x", id="not-digits"),
    pytest.param("\u0661\u0662:x", id="non-ascii-digits"),
]


def every_page(
    page: Callable[..., tuple[list[Any], Cursor | None]], limit: int
) -> tuple[list[Any], int]:
    """Every item of a listing, page after page, each page asked for by the previous one's
    cursor as text (as a client of the API sends it); and the number of pages."""
    seen: list[Any] = []
    cursor: str | None = None
    pages = 0
    while True:
        found, nxt = page(limit=limit, cursor=cursor)
        pages += 1
        seen += found
        if nxt is None:
            return seen, pages
        cursor = encode_cursor(nxt)


def test_a_cursor_is_its_score_and_member_and_reads_back_the_same() -> None:
    assert encode_cursor((1700000000123, "turn_1/apr_2")) == "1700000000123:turn_1/apr_2"
    assert decode_cursor("1700000000123:turn_1/apr_2") == (1700000000123, "turn_1/apr_2")
    assert decode_cursor("5:a:b") == (5, "a:b")  # the member may hold the separator
    assert decode_cursor("9" * CURSOR_DIGITS + ":x") == (10**CURSOR_DIGITS - 1, "x")


@pytest.mark.parametrize("raw", BAD_CURSORS)
def test_a_cursor_that_is_no_pages_is_a_bad_cursor_naming_cursor(raw: str) -> None:
    with pytest.raises(BadCursor) as refused:
        decode_cursor(raw)
    assert isinstance(refused.value, LedgerError)
    assert "cursor" in str(refused.value) and len(str(refused.value)) < 120


def test_a_listing_pages_newest_first_through_equal_scores_and_dropped_rows(
    client: Client,
) -> None:
    """Rows ``keep`` drops are passed over and a page fills up from below; members of one
    score go across pages without a gap or a repeat."""
    scores = {f"m{n}": (5 if n < 5 else n) for n in range(10)}
    client.zadd(INDEX, scores)
    dropped = {"m3", "m7"}

    def keep(rows: list[Row]) -> list[tuple[str, int, str]]:
        return [(member, score, member) for member, score in rows if member not in dropped]

    def page(*, limit: int, cursor: str | None) -> tuple[list[str], Cursor | None]:
        return read_page(client, INDEX, keep, limit=limit, cursor=cursor)

    seen, pages = every_page(page, limit=3)
    assert seen == ["m9", "m8", "m6", "m5", "m4", "m2", "m1", "m0"]
    assert pages == 3


def test_the_conversations_listing_pages_newest_first(client: Client) -> None:
    store = TurnStore(Ledger(client))
    for n in range(5):
        event = turn_started(f"t{n}", conversation_id=f"c{n}").model_copy(update={"ts": 10.0 + n})
        assert store.create(event, first_run=f"r{n}", look_at_ms=1000, fields={})

    seen, pages = every_page(store.conversations.page, limit=2)
    assert [c.conversation_id for c in seen] == ["c4", "c3", "c2", "c1", "c0"]
    assert pages == 3


def test_the_approvals_listing_pages_newest_first(client: redis.Redis, tmp_path: Path) -> None:
    settings = load_settings(journal_read_backoff_s=0, approval="send_email")
    turns = []
    for n in range(5):
        h = Harness(client, tmp_path, settings=settings)
        h.ids.namespace = f"n{n}_"
        h.clock.t += n
        h.start([SEND, {"text": "Done."}])
        assert h.run_next() is None  # waiting for a person
        turns.append(h.turn_id)

    store = TurnStore(Ledger(client))
    seen, pages = every_page(store.approvals.page, limit=2)
    assert [r.turn_id for r in seen] == turns[::-1]
    assert pages == 3


@pytest.mark.parametrize("raw", BAD_CURSORS)
def test_both_listings_refuse_a_bad_cursor_with_the_same_error(client: Client, raw: str) -> None:
    store = TurnStore(Ledger(client))
    with pytest.raises(BadCursor):
        store.conversations.page(limit=2, cursor=raw)
    with pytest.raises(BadCursor):
        store.approvals.page(limit=2, cursor=raw)


@pytest.mark.parametrize(
    "cursor",
    [
        pytest.param((10**5000, "x"), id="5000-digit-score"),
        pytest.param((10**CURSOR_DIGITS, "x"), id="21-digit-score"),
        pytest.param((-1, "x"), id="negative"),
        pytest.param((5, ""), id="no-member"),
    ],
)
def test_a_cursor_given_as_its_pair_is_bounded_too(client: Client, cursor: Cursor) -> None:
    store = TurnStore(Ledger(client))
    with pytest.raises(BadCursor):
        store.conversations.page(limit=2, cursor=cursor)
    with pytest.raises(BadCursor):
        store.approvals.page(limit=2, cursor=cursor)
