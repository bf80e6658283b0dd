"""The listing of conversations (``ledger.conversations``) on fakeredis, a real redis-server and
a Redis Cluster: written when a turn joins a conversation, paged newest first, forgotten with its
newest turn's keys, and erased on request only when every turn of it has ended."""

from __future__ import annotations

import pytest
from factories import base, turn_started

from ledger import keys
from ledger.conversations import TITLE_CHARS, Conversations, title_of
from ledger.events import RunEnded, TurnEnded
from ledger.store import Client, Ledger
from ledger.turn import Step, TurnStatus
from ledger.turns import EXPIRE, TurnStore

FAR = 2**62


def new_turn(
    store: TurnStore, turn_id: str, conversation_id: str, ts: float, message: str = "hello"
) -> None:
    event = turn_started(turn_id, message=message, conversation_id=conversation_id)
    event = event.model_copy(update={"ts": ts})
    assert store.create(event, first_run=f"r-{turn_id}", look_at_ms=1000, fields={})


def finish(store: TurnStore, turn_id: str) -> None:
    """Claim the turn and complete it (its keys get the finished-turn expiry)."""
    run = f"r-{turn_id}"
    lease = store.claim(turn_id, run, lease_until_ms=FAR, event_id=f"s-{turn_id}", ts=1.0).lease
    assert lease is not None
    ended = [
        RunEnded(**base(turn_id, run), reason="completed"),
        TurnEnded(**base(turn_id, run), status="completed"),
    ]
    store.transition(
        turn_id, Step.COMPLETE, expect=store.holder(lease), events=ended, expiry=EXPIRE
    )


@pytest.fixture
def store(client: Client) -> TurnStore:
    return TurnStore(Ledger(client))


def test_a_title_is_the_first_message_flattened_and_cut() -> None:
    assert title_of("  hello\n  world ") == "hello world"
    cut = title_of("x" * 500)
    assert len(cut) == TITLE_CHARS and cut.endswith("…")


def test_conversations_are_listed_most_recently_updated_first_with_their_newest_turn(
    store: TurnStore,
) -> None:
    new_turn(store, "t1", "c1", 10.0, "first of c1")
    new_turn(store, "t2", "c2", 20.0, "first of c2")
    new_turn(store, "t3", "c1", 30.0, "second of c1")
    finish(store, "t2")

    listed, cursor = store.conversations.page(limit=10)
    assert cursor is None
    rows = [(c.conversation_id, c.title, c.updated_at, c.newest.turn_id) for c in listed]
    assert rows == [("c1", "first of c1", 30.0, "t3"), ("c2", "first of c2", 20.0, "t2")]
    assert [c.newest.status for c in listed] == [TurnStatus.QUEUED, TurnStatus.COMPLETED]


def test_pages_follow_each_other_without_gaps_or_repeats_even_on_equal_scores(
    store: TurnStore,
) -> None:
    for n in range(7):
        new_turn(store, f"t{n}", f"c{n}", 5.0 if n < 4 else float(n))
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        page, cursor = store.conversations.page(limit=2, cursor=cursor)
        pages += 1
        seen += [c.conversation_id for c in page]
        if cursor is None:
            break
    # c0..c3 share one score (5 s), above c4's (4 s)
    assert seen == ["c6", "c5", "c3", "c2", "c1", "c0", "c4"]
    assert pages == 4


def test_a_continue_moves_its_conversation_to_the_top(store: TurnStore) -> None:
    new_turn(store, "t1", "c1", 10.0)
    new_turn(store, "t2", "c2", 20.0)
    store.conversations.touch("c1", 40_000)
    listed, _ = store.conversations.page(limit=10)
    assert [(c.conversation_id, c.updated_at) for c in listed] == [("c1", 40.0), ("c2", 20.0)]


def test_a_conversation_whose_newest_turn_expired_is_forgotten_on_read(
    store: TurnStore, client: Client
) -> None:
    new_turn(store, "t1", "c1", 10.0)
    new_turn(store, "t2", "c2", 20.0)
    finish(store, "t2")
    client.delete(*keys.turn_keys("t2"))  # as its expiry does

    listed, _ = store.conversations.page(limit=10)
    assert [c.conversation_id for c in listed] == ["c1"]
    assert client.zscore(keys.conversations(), "c2") is None
    assert not client.exists(keys.conversation_turns("c2"), keys.conversation_meta("c2"))
    assert store.conversations.get("c2") is None


def test_forgetting_keeps_a_conversation_a_new_turn_joined_meanwhile(
    store: TurnStore, client: Client
) -> None:
    new_turn(store, "t1", "c1", 10.0)
    client.delete(*keys.turn_keys("t1"))
    new_turn(store, "t2", "c1", 20.0)  # joined after a reader found t1 gone
    assert not store.conversations.forget("c1", "t1", 10_000)
    conversation = store.conversations.get("c1")
    assert conversation is not None and conversation.newest_turn == "t2"


def test_one_conversation_reads_its_turns_in_order_with_their_messages(store: TurnStore) -> None:
    new_turn(store, "t1", "c1", 10.0, "one")
    new_turn(store, "t2", "c1", 20.0, "two")
    conversation = store.conversations.get("c1")
    assert conversation is not None
    assert conversation.title == "one"
    assert [(m.turn_id, message) for m, message in conversation.turns] == [
        ("t1", "one"),
        ("t2", "two"),
    ]
    assert store.conversations.get("c-unknown") is None


def test_an_erase_is_refused_while_a_turn_has_not_ended_and_then_removes_every_key(
    store: TurnStore, client: Client
) -> None:
    new_turn(store, "t1", "c1", 10.0)
    new_turn(store, "t2", "c1", 20.0)
    finish(store, "t1")
    refused = store.conversations.erase("c1")
    assert (refused.ok, refused.blocking, refused.status) == (False, "t2", "queued")
    assert client.exists(keys.turn_meta("t1")), "a refused erase deletes nothing"

    finish(store, "t2")
    erased = store.conversations.erase("c1")
    assert (erased.ok, erased.turns) == (True, 2)
    for turn_id in ("t1", "t2"):
        assert not client.exists(*keys.turn_keys(turn_id), keys.turn_cancel(turn_id))
        assert client.zscore(keys.active_turns(), turn_id) is None
    assert not client.exists(keys.conversation_turns("c1"), keys.conversation_meta("c1"))
    assert client.zscore(keys.conversations(), "c1") is None
    assert store.conversations.erase("c1").known is False
    assert store.conversations.erased("c1") and not store.conversations.erased("c2")


def test_the_listing_holds_only_single_slot_writes(store: TurnStore, client: Client) -> None:
    """Every key a conversation owns carries its hash tag; the listing is one global key."""
    new_turn(store, "t1", "c1", 10.0)
    assert keys.conversation_meta("c1").count("{c1}") == 1
    assert keys.conversation_turns("c1").count("{c1}") == 1
    assert Conversations(store.ledger).get("c1") is not None
