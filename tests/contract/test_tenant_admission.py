"""Tenant admission's records (``ledger.tenants``, ``lua/tenants.lua``) on fakeredis, a real
redis-server and a Redis Cluster (docs/semantics.md, tenants): round-robin across the tenants
with waiting turns, a tenant's bound on its slots, resumes before new turns, the rate's even
spacing, the room ahead of the workers, a slot given back once, and a slot a crash left behind
given back only if it is still the one read; and the lifecycle's hook seam
(``worker.lifecycle.hooks``): a concern's module refuses, gates and is told, without the
lifecycle's body knowing it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from ledger.store import Client, Ledger
from ledger.tenants import Admissions, Admitted, Ahead, Limits, Tenants
from ledger.turn import TurnMeta
from tests.harness import Harness
from tests.support.fixtures import Backend
from worker.base.errors import QueueFull, Refused
from worker.lifecycle.hooks import Hook, Hooks
from worker.lifecycle.tenancy import MEND_S, SETTLED_AFTER_MS

NOW = 1_700_000_000_000
FREE = Limits()
#: room for any number of new turns ahead of the workers
ROOMY = 1_000


@pytest.fixture
def tenants(client: Client) -> Tenants:
    return Tenants(Ledger(client))


def ids(admissions: Admissions) -> list[str]:
    return [a.turn_id for a in admissions.admitted]


def queue(tenants: Tenants, *turns: tuple[str, str], limits: Limits = FREE) -> None:
    """Each (tenant, turn) waits, with no room: nothing is let through."""
    for tenant, turn in turns:
        assert ids(tenants.wait(tenant, turn, "new", NOW, limits, 0)) == []


def test_waiting_turns_start_round_robin_across_tenants_whatever_their_order(
    tenants: Tenants,
) -> None:
    queue(tenants, *[("a", f"a{i}") for i in range(4)], ("b", "b0"), ("b", "b1"), ("c", "c0"))
    let = tenants.pump(NOW, FREE, 6)
    assert ids(let) == ["a0", "b0", "c0", "a1", "b1", "a2"]
    assert tenants.waiting_tenants() == ["a"]
    assert [a.waited_ms for a in let.admitted] == [0] * 6
    assert ids(tenants.pump(NOW + 5, FREE, ROOMY)) == ["a3"]
    assert tenants.waiting_tenants() == []


def test_a_new_turn_starts_at_once_only_while_nothing_waits_and_the_room_allows(
    tenants: Tenants,
) -> None:
    assert tenants.start("a", "a0", NOW, FREE, 1)
    assert not tenants.start("a", "a1", NOW, FREE, 0)  # no room ahead of the workers
    queue(tenants, ("b", "b0"))
    assert not tenants.start("c", "c0", NOW, FREE, ROOMY)  # b's turn waits: c's goes behind it
    assert tenants.counts("a").running == 1 and tenants.counts("c").running == 0


def test_a_tenant_never_holds_more_slots_than_its_bound_and_a_slot_comes_back_once(
    tenants: Tenants,
) -> None:
    two = Limits(concurrency=2)
    queue(tenants, *[("a", f"a{i}") for i in range(4)], ("b", "b0"), limits=two)
    assert ids(tenants.pump(NOW, two, ROOMY)) == ["a0", "b0", "a1"]
    assert ids(tenants.pump(NOW, two, ROOMY)) == []
    assert ids(tenants.leave("a0", NOW, two, ROOMY)) == ["a2"]
    assert ids(tenants.leave("a0", NOW, two, ROOMY)) == []  # given back once: nothing more
    assert tenants.counts("a").running == 2 and tenants.counts("a").queued == 1


def test_a_resuming_turn_takes_its_tenants_next_slot_before_new_turns_and_needs_no_room(
    tenants: Tenants,
) -> None:
    one = Limits(concurrency=1)
    assert tenants.start("a", "a0", NOW, one, ROOMY)
    queue(tenants, ("a", "a1"), limits=one)
    assert ids(tenants.wait("a", "r0", "resume", NOW, one, 0)) == []  # no free slot
    let = tenants.leave("a0", NOW + 50, one, 0)
    assert [(a.turn_id, a.kind, a.waited_ms) for a in let.admitted] == [("r0", "resume", 50)]
    assert ids(tenants.leave("r0", NOW, one, 0)) == []  # a1 is new: it needs room
    assert ids(tenants.pump(NOW, one, 1)) == ["a1"]


def test_the_rate_spaces_a_tenants_starts_evenly_and_says_when_the_next_may_be(
    tenants: Tenants,
) -> None:
    rate = Limits(interval_ms=500)  # 2/s
    assert tenants.start("a", "a0", NOW, rate, ROOMY)
    assert not tenants.start("a", "a1", NOW + 100, rate, ROOMY)
    queue(tenants, ("a", "a1"), ("a", "a2"), ("b", "b0"), limits=rate)
    let = tenants.pump(NOW + 100, rate, ROOMY)
    assert ids(let) == ["b0"] and let.wake_ms == NOW + 500  # b's rate is its own
    assert ids(tenants.pump(NOW + 499, rate, ROOMY)) == []
    assert ids(tenants.pump(NOW + 500, rate, ROOMY)) == ["a1"]
    assert ids(tenants.pump(NOW + 999, rate, ROOMY)) == []
    assert ids(tenants.pump(NOW + 1000, rate, ROOMY)) == ["a2"]


def test_waiting_again_keeps_a_turns_place_and_a_turn_let_through_is_let_through_again(
    tenants: Tenants,
) -> None:
    queue(tenants, ("a", "a0"), ("a", "a1"))
    again = tenants.wait("a", "a0", "new", NOW + 9, FREE, 0)
    assert not again.queued and ids(again) == []  # already waiting: its place kept
    assert ids(tenants.pump(NOW + 10, FREE, 1)) == ["a0"]
    # a crash before its release: the reaper's look lets it through again, still one slot
    assert ids(tenants.wait("a", "a0", "new", NOW + 20, FREE, 0)) == ["a0"]
    assert tenants.counts("a").running == 1


def test_a_slot_a_crash_left_behind_is_dropped_only_if_still_the_one_read(
    tenants: Tenants,
) -> None:
    assert tenants.start("a", "a0", NOW, FREE, ROOMY)
    [(turn, since)] = tenants.running("a")
    assert (turn, since) == ("a0", NOW)
    assert not tenants.drop("a", "a0", since + 1, NOW + 10)  # taken again since: kept
    assert tenants.drop("a", "a0", since, NOW + 10)
    assert tenants.counts("a").running == 0
    assert ids(tenants.leave("a0", NOW, FREE, ROOMY)) == []


def test_the_room_is_read_from_the_brokers_queues_in_the_script_on_the_ledgers_own_server(
    client: Client, backend: Backend, tenants: Tenants
) -> None:
    """Where the broker is the ledger's server (never a cluster: its queues are in other slots),
    the script counts the messages waiting in the chunk queues itself."""
    if backend.name == "cluster":
        pytest.skip("a broker is never a cluster's node: no queue is read in a cluster's script")
    queues = ("dres.foreground", "dres.background\x06\x163")
    ahead = Ahead(2, queues)
    client.lpush(queues[0], "m1")
    client.lpush(queues[1], "m2")
    assert not tenants.start("a", "a0", NOW, FREE, ahead)
    queue(tenants, ("a", "a0"))
    client.rpop(queues[1])
    assert ids(tenants.pump(NOW, FREE, ahead)) == ["a0"]


# -- the hook seam --------------------------------------------------------------------------


class Closed(Hook):
    """A concern of its own: refuses every turn of one tenant, and hears every turn leave."""

    def __init__(self) -> None:
        self.left: list[str] = []

    def refuse(self, tenant: str) -> None:
        if tenant == "closed":
            raise Refused("tenant closed is closed")

    def leave(self, turn_id: str) -> Sequence[Admitted]:
        self.left.append(turn_id)
        return ()


class Never(Hook):
    """A gate that lets no turn start (a maintenance window)."""

    gates = True

    def start(self, tenant: str, turn_id: str) -> bool:
        return False

    def wait(self, meta: TurnMeta, kind: str) -> Sequence[Admitted]:
        return ()


def test_a_concerns_hook_refuses_a_turn_and_hears_turns_leave_beside_tenancy(
    client: Client, tmp_path: Path
) -> None:
    h = Harness(client, tmp_path)
    closed = Closed()
    h.lifecycle.hooks = Hooks([h.lifecycle.tenancy, closed])
    with pytest.raises(Refused):
        h.lifecycle.enqueue("hello", model=h.script([{"text": "hi"}]), tenant="closed")
    assert client.keys("dres:turn:*") == []
    turn = h.lifecycle.enqueue("hello", model=h.script([{"text": "hi"}]), tenant="open")
    h.follow(turn.turn_id)
    h.run_next()
    assert closed.left == [turn.turn_id]
    assert h.lifecycle.tenant_view("open")["running"] == 0


def test_a_gating_hook_decides_when_turns_start_and_only_one_may_gate(
    client: Client, tmp_path: Path
) -> None:
    h = Harness(client, tmp_path)
    h.lifecycle.hooks = Hooks([Never()])
    turn = h.lifecycle.enqueue("hello", model=h.script([{"text": "hi"}]))
    meta = h.ledger.meta(turn.turn_id)
    assert (turn.run_id, meta.status, meta.held) == ("", "queued", True)
    assert h.messages.sent == []
    with pytest.raises(ValueError, match="at most one hook"):
        Hooks([h.lifecycle.tenancy, Never()])


def test_a_tenant_with_its_most_turns_queued_is_refused_before_anything_is_recorded(
    client: Client, tmp_path: Path
) -> None:
    h = Harness(client, tmp_path)
    h.settings = h.settings.model_copy(update={"tenant_max_queued": 1, "tenant_concurrency": 1})
    h.lifecycle = h.lifecycle_for(h.ledger, h.cache)
    model = h.script([{"text": "hi"}])
    first, second = (h.lifecycle.enqueue("hi", model=model, tenant="a") for _ in range(2))
    assert first.run_id and not second.run_id
    with pytest.raises(QueueFull) as refused:
        h.lifecycle.enqueue("hi", model=model, tenant="a", turn_id="turn-over")
    assert refused.value.retry_after_s == 1
    assert not client.exists("dres:turn:{turn-over}:meta")
    assert h.lifecycle.tenant_view("a") == {
        "tenant": "a",
        "running": 1,
        "queued": 1,
        "limits": {"concurrency": 1, "rate": None, "max_queued": 1},
    }


def test_the_reapers_mend_gives_back_a_slot_an_ended_turn_left_though_nothing_waits(
    client: Client, tmp_path: Path
) -> None:
    """A crash between a turn's end and its slot's return (or a Redis restart that lost the
    return, not the end): the tenant counts a turn running that is not, with nothing of it
    waiting; a sweep ``SETTLED_AFTER_MS`` later gives the slot back — a younger one is kept."""
    h = Harness(client, tmp_path)
    turn = h.lifecycle.enqueue("hello", model=h.script([{"text": "hi"}]), tenant="a")
    h.follow(turn.turn_id)
    h.run_next()
    tenants = h.lifecycle.store.tenants
    now_ms = int(h.clock.now() * 1000)
    assert tenants.start("a", turn.turn_id, now_ms, FREE, ROOMY)  # the slot left behind
    h.lifecycle.hooks.sweep()
    assert h.lifecycle.tenant_view("a")["running"] == 1  # too young to tell from a live start
    h.clock.t += SETTLED_AFTER_MS / 1000 + MEND_S
    h.lifecycle.hooks.sweep()
    assert h.lifecycle.tenant_view("a")["running"] == 0
    assert tenants.holding_tenants() == []
