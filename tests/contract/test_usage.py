"""What a turn spends (docs/events.md: ``model_done.usage``) and its token budget
(docs/semantics.md: ``DRES_TURN_TOKEN_BUDGET``), through the real loop and lifecycle."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import redis
from factories import base, text, turn_started
from harness import Harness

from ledger import keys
from ledger.events import ModelDone, TokenUsage
from ledger.lease import Lease
from ledger.store import Ledger
from ledger.turns import TurnStore
from ledger.usage import UsageFold
from rigs import DONE
from worker.base.settings import load_settings

LOOKUP = {"tool_calls": [{"name": "get_ticket", "input": {"ticket_id": "T-1"}}]}


def spending(step: dict[str, Any], input_tokens: int, output_tokens: int) -> dict[str, Any]:
    return {**step, "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens}}


def test_a_scripted_steps_usage_lands_on_its_model_done_and_the_turn_sums_them(
    client: redis.Redis, tmp_path: Path
) -> None:
    h = Harness(client, tmp_path)
    h.start([spending(LOOKUP, 100, 20), DONE])
    ended = h.run_to_end()
    assert ended.status == "completed"
    done = [e for e in h.events("model_done") if isinstance(e, ModelDone)]
    # the step without usage reports none: its model_done says nothing rather than zero
    assert [d.usage for d in done] == [TokenUsage(input_tokens=100, output_tokens=20), None]
    assert UsageFold().feed(h.events()).spent() == TokenUsage(input_tokens=100, output_tokens=20)
    assert h.ledger.meta(h.turn_id).usage == TokenUsage(input_tokens=100, output_tokens=20)


def test_past_its_budget_a_turn_stops_before_the_next_model_call_and_continue_grants_it_again(
    client: redis.Redis, tmp_path: Path
) -> None:
    h = Harness(client, tmp_path, settings=load_settings(turn_token_budget=1000))
    h.start([spending(LOOKUP, 400, 200), spending(LOOKUP, 400, 200), spending(DONE, 400, 200)])
    ended = h.run_to_end()
    assert (ended.status, ended.code, ended.can_continue) == ("stopped", "budget", True)
    assert len(h.events("model_start")) == 2  # the third call was never made
    assert "1200 tokens" in ended.detail

    refused = h.lifecycle.continue_turn(h.turn_id, auto=True)
    assert not refused.ok, "a budget stop is never continued automatically"
    continued = h.lifecycle.continue_turn(h.turn_id, auto=False)
    assert continued.ok, continued.reason
    h.pending = continued.run_id
    ended = h.run_to_end()
    assert ended.status == "completed"
    fold = UsageFold().feed(h.events())
    assert fold.spent() == TokenUsage(input_tokens=1200, output_tokens=600)
    assert fold.since_continue == 600
    # the metadata's totals are the stream's sum, across runs and the Continue
    assert h.ledger.meta(h.turn_id).usage == fold.spent()


def claimed_turn(ledger: Ledger) -> Lease:
    store = TurnStore(ledger)
    assert store.create(turn_started("t1"), first_run="r1", look_at_ms=0, fields={})
    claim = store.claim("t1", "r1", lease_until_ms=2**62, event_id="claim-r1", ts=1.0)
    assert claim.lease is not None
    return claim.lease


def model_done(input_tokens: int, output_tokens: int) -> ModelDone:
    spent = TokenUsage(input_tokens=input_tokens, output_tokens=output_tokens)
    return ModelDone(**base(), usage=spent)


def test_an_append_made_again_after_it_landed_unseen_counts_its_usage_once(
    client: redis.Redis,
) -> None:
    """The totals move in the append's atomic step, only for the events it adds: a batch (text
    and its ``model_done``) and a lone ``model_done``, each sent again as a retry would be."""
    ledger = Ledger(client)
    lease = claimed_turn(ledger)
    assert ledger.meta("t1").usage == TokenUsage()
    batch = [text("Hi"), model_done(10, 2)]
    ledger.append_many(batch, lease=lease)
    lone = model_done(5, 1)
    ledger.append(lone, lease=lease)
    assert ledger.meta("t1").usage == TokenUsage(input_tokens=15, output_tokens=3)

    lease.seq, lease.last = 1, ("", "")  # the replies were lost: both are sent again
    ledger.append_many(batch, lease=lease)
    ledger.append(lone, lease=lease)
    assert lease.seq == 4
    assert ledger.meta("t1").usage == TokenUsage(input_tokens=15, output_tokens=3)
    assert UsageFold().feed(ledger.events("t1")).spent() == ledger.meta("t1").usage


def test_a_turn_recorded_before_its_metadata_kept_totals_gets_none_and_its_stream_has_the_sum(
    client: redis.Redis,
) -> None:
    ledger = Ledger(client)
    lease = claimed_turn(ledger)
    client.hdel(keys.turn_meta("t1"), "input_tokens", "output_tokens")
    ledger.append_many([text("Hi"), model_done(10, 2)], lease=lease)
    ledger.append(model_done(5, 1), lease=lease)
    assert ledger.meta("t1").usage is None, "no partial totals for a turn that had none"
    assert UsageFold().feed(ledger.events("t1")).spent() == TokenUsage(
        input_tokens=15, output_tokens=3
    )


def test_a_forks_usage_is_its_own_calls_as_its_stream_holds_them(
    client: redis.Redis, tmp_path: Path
) -> None:
    """A fork copies no stream (docs/semantics.md): its totals start at zero, whatever the turn
    it replaces spent, and stay its own stream's sum; the replaced turn keeps its own."""
    h = Harness(client, tmp_path)
    first = h.enqueue([spending(LOOKUP, 100, 20), spending(DONE, 50, 5)], "look it up")
    h.follow(first.turn_id)
    assert h.run_to_end().status == "completed"
    forked = h.lifecycle.fork(first.turn_id, model=h.script([spending(DONE, 7, 3)]))
    assert h.ledger.meta(forked.turn_id).usage == TokenUsage()
    h.follow(forked.turn_id)
    assert h.run_to_end().status == "completed"
    for turn_id, spent in ((first.turn_id, (150, 25)), (forked.turn_id, (7, 3))):
        usage = h.ledger.meta(turn_id).usage
        assert usage == UsageFold().feed(h.ledger.events(turn_id)).spent()
        assert usage == TokenUsage(input_tokens=spent[0], output_tokens=spent[1])
