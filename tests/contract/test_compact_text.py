"""Streamed text stored compactly (ledger.codec), read back whole by every Ledger reader.

Run on fakeredis and on a real redis-server: a run's ``text`` events are stored without the
envelope their place implies, and ``read_turn``, a paged read, a read from mid-turn and the live
tail all give the same events in the dict form of docs/events.md
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
import redis
from factories import text, turn_started

from ledger import keys
from ledger.store import Ledger
from ledger.turns import TurnStore

FAR = 2**62
PARTS = 9


def streamed_turn(ledger: Ledger) -> list[str]:
    """A turn whose first run streamed ``PARTS`` texts (a batch, then one by one); their ids."""
    store = TurnStore(ledger)
    assert store.create(turn_started("t1"), first_run="r1", look_at_ms=0, fields={})
    lease = store.claim("t1", "r1", lease_until_ms=FAR, event_id="ev-open", ts=1.0).lease
    assert lease is not None
    said = [text(f"part {i} ").model_copy(update={"ts": 1.0 + i / 20}) for i in range(PARTS)]
    ids = ledger.append_many(said[:4], lease=lease)
    return ids + [ledger.append(event, lease=lease) for event in said[4:]]


def dict_form(envelopes: Any) -> list[tuple[str, dict[str, Any]]]:
    return [(e.stream_id, e.event.model_dump(mode="json")) for e in envelopes]


def test_streamed_text_is_stored_compactly_and_read_in_the_dict_form(client: redis.Redis) -> None:
    ledger = Ledger(client)
    ids = streamed_turn(ledger)

    stored = dict(client.xrange(keys.turn_events("t1")))
    assert all(not stored[sid.encode()][b"e"].startswith(b"{") for sid in ids)
    whole = dict_form(ledger.read_turn("t1"))
    texts = [(sid, event) for sid, event in whole if event["type"] == "text"]
    assert [sid for sid, _ in texts] == ids
    for i, (sid, event) in enumerate(texts):
        assert event == {
            "v": 1,
            "type": "text",
            "event_id": f"ev-open:{sid.split('-')[1]}",
            "turn_id": "t1",
            "run_id": "r1",
            "chunk": 0,
            "ts": pytest.approx(1.0 + i / 20),
            "text": f"part {i} ",
        }
    assert len({event["event_id"] for _, event in whole}) == len(whole)


def test_paged_and_mid_turn_reads_give_the_same_events_as_the_whole(client: redis.Redis) -> None:
    ids = streamed_turn(Ledger(client))
    ledger = Ledger(client, page=2)  # every page after the first starts mid-run
    whole = dict_form(ledger.read_turn("t1"))

    for cut in range(len(whole)):
        after = whole[cut][0]
        assert dict_form(ledger.read_after("t1", after)) == whole[cut + 1 :]
        assert dict_form(ledger.read_after("t1", after, limit=3)) == whole[cut + 1 : cut + 4]
    assert dict_form(ledger.read_from("t1", ids[5])) == whole[-(PARTS - 5) :]
    tailed = next(ledger.tail("t1", ids[2], block_ms=10, count=2))
    assert dict_form(tailed) == [w for w in whole if w[0] in ids[3:5]]


def test_text_whose_run_started_is_gone_is_skipped_with_a_warning(
    client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    ledger = Ledger(client)
    ids = streamed_turn(ledger)
    epoch = ids[0].split("-")[0]
    client.xdel(keys.turn_events("t1"), f"{epoch}-0")

    with caplog.at_level(logging.WARNING, logger="ledger.store"):
        read = ledger.read_turn("t1")

    assert [e.event.type for e in read] == ["turn_started"]
    skipped = [r for r in caplog.records if r.getMessage() == "skipped malformed ledger entry"]
    assert [r.stream_id for r in skipped] == ids  # type: ignore[attr-defined]
