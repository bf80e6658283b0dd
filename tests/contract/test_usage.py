"""What a turn spends (docs/events.md: ``model_done.usage``) and its token budget
(docs/semantics.md: ``DRES_TURN_TOKEN_BUDGET``), through the real loop and lifecycle."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import redis
from harness import Harness

from ledger.events import ModelDone, TokenUsage
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
