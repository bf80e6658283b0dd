"""Row L1 (issue 48): how a framework's blocks become rows, how the full run and ``--only``
reach it, and the fake model's responder that lets it run thousands of one-call turns."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bench import framework_bench
from bench.framework_agents import Framework
from bench.framework_bench import TARGET, Samples, framework_rows, measure_framework, summary
from rigs.providers import Received, tool_then_text


async def nothing(prompt: str = "") -> None:
    return None


def framework(adapter: Any = None, missing: str = "") -> Framework:
    return Framework("pydantic-ai", "agent.run", nothing, nothing, adapter, missing)


def samples() -> Samples:
    p50 = {
        "dres": [12.0, 15.0, 11.0],
        "alone": [10.0, 10.0, 10.0],
        "streamed": [12.0, 10.0, 11.0],
        # turns of CALLS (6) calls: 5 calls more than a turn of one
        "dres_many": [52.0, 45.0, 56.0],
        "alone_many": [40.0, 35.0, 40.0],
    }
    p99 = {"dres": [30.0, 40.0, 35.0], "alone": [20.0, 25.0, 50.0], "streamed": [1.0, 1.0, 1.0]}
    return Samples(p50, p99, turns=120)


def test_l1_reads_a_tool_call_by_dres_against_one_by_the_agent_alone_paired_by_block() -> None:
    """The target row: per block, what a turn of 6 calls takes beyond a turn of one, per call
    (dres (52-12)/5 = 8 against (40-10)/5 = 6: 1.33)."""
    per_call, p50, p99, streamed, price = framework_rows(
        framework(adapter=object()), samples(), {"turns_per_side": 120}
    )

    assert {row.number for row in (per_call, p50, p99, streamed, price)} == {"L1"}
    assert per_call.target == TARGET == 1.5 and per_call.unit == "ms"
    assert "a tool call inside the agent" in per_call.name
    assert per_call.dres == [8.0, 6.0, 9.0] and per_call.raw == [6.0, 5.0, 6.0]
    assert per_call.pair_ratios == [pytest.approx(8 / 6), pytest.approx(1.2), pytest.approx(1.5)]
    assert per_call.verdict == "meets"
    assert p50.name == "pydantic-ai: a turn with one tool call, run by dres vs the agent alone, p50"
    assert p50.target is None and p50.unit == "ms"
    assert p50.pair_ratios == [pytest.approx(1.2), pytest.approx(1.5), pytest.approx(1.1)]
    assert p50.ratio == pytest.approx(1.2) and p50.verdict == "info"
    assert "agent.run" in p50.baseline
    assert (p99.dres, p99.raw, p99.verdict) == ([30.0, 40.0, 35.0], [20.0, 25.0, 50.0], "info")
    assert (streamed.dres, streamed.raw) == ([12.0, 15.0, 11.0], [12.0, 10.0, 11.0])
    assert streamed.target is None and "streamed" in streamed.name
    # the price: each block's p50 dres - p50 alone, an absolute figure without a target
    assert price.absolute and price.dres == [2.0, 5.0, 1.0] and price.verdict == "info"
    assert p50.extra["framework"] == "pydantic-ai" and p50.extra["turns_per_side"] == 120
    assert json.dumps([row.as_dict() for row in (per_call, p50, p99, streamed, price)])


def test_l1_without_the_frameworks_adapter_sets_the_agent_alone_apart_and_says_why() -> None:
    alone = Samples(p50={"alone": [9.0, 11.0], "streamed": [10.0, 12.0]}, p99={}, turns=80)

    [row] = framework_rows(framework(missing="no adapter yet"), alone, {})

    assert row.absolute and row.dres == [9.0, 11.0] and row.verdict == "info"
    assert "dres not measured: no adapter yet" in row.name
    assert summary([row], {"versions": {}, "loadavg_start": [1], "loadavg_end": [2]})[1] == (
        "pydantic-ai: dres not measured: no adapter yet"
    )


def test_l1s_blocks_turn_the_sides_order_round_and_leave_the_warm_up_out() -> None:
    """Without an adapter the runs alone take turns; every block's requests are counted (two a
    turn of one call, CALLS + 1 a turn of CALLS), the warm-up block's figures are dropped."""
    order: list[str] = []
    calls = iter(range(1000))

    def alone(prompt: str) -> Any:
        order.append("alone" if prompt == framework_bench.PROMPT else "alone_many")
        return nothing()

    def streamed(prompt: str) -> Any:
        order.append("streamed")
        return nothing()

    def requests() -> int:
        n = next(calls)
        if n % 2 == 0:
            return 0  # cleared before a side, counted after
        side = order[-1]
        return (framework_bench.CALLS + 1 if side == "alone_many" else 2) * 3

    plan = framework_bench.FrameworkPlan(blocks=2, turns=3)
    fw = Framework("x", "run", alone, streamed, None, "none")

    got = measure_framework(None, requests, fw, plan)  # type: ignore[arg-type]

    # block -1 (warm-up), 0 and 1: the order turns round each block
    sides = ["alone", "streamed", "alone_many"]
    blocks = [sides[2:] + sides[:2], sides, sides[1:] + sides[:1]]
    assert order == [side for block in blocks for side in block for _ in range(3)]
    assert len(got.p50["alone"]) == len(got.p50["alone_many"]) == 2 and got.turns == 6


def test_l1_fails_a_block_whose_turns_did_not_ask_the_model_as_often_as_they_call() -> None:
    plan = framework_bench.FrameworkPlan(blocks=1, turns=2)
    with pytest.raises(RuntimeError, match="3 model requests for 2 turns, not 7 each"):
        measure_framework(None, lambda: 3, framework(), plan)  # type: ignore[arg-type]


def test_only_framework_runs_row_l1_alone_and_the_full_run_lists_it() -> None:
    from bench.__main__ import GROUPS, ONLY, OWN_MAIN, parse_args

    assert parse_args(["--only", "framework", "--quick"]).only == "framework"
    assert OWN_MAIN["framework"] == framework_bench.main and "L1" in ONLY["framework"]
    assert framework_bench.GROUP in GROUPS
    assert framework_bench.GROUP.plan(parse_args(["--quick"])) == framework_bench.QUICK


def test_l1s_details_line_names_each_frameworks_p50s_and_dres_price() -> None:
    from bench.report import details

    rows = framework_rows(framework(adapter=object()), samples(), {"turns_per_side": 120})
    info = {"versions": {"pydantic-ai-slim": "2.78.0"}, "pydantic-ai": {"p50": samples().p50}}

    line = next(
        x for x in details({r.name: r for r in rows}, {"framework": info}) if x.startswith("Row L1")
    )

    assert line == (
        "Row L1 (120 turns a side; pydantic-ai-slim 2.78.0): pydantic-ai: a tool call 8.0 ms by "
        "dres, 6.0 alone; a turn of one call: dres 12.0 ms, alone 10.0 ms, alone streamed "
        "11.0 ms; dres's price 2.0 ms a turn of one tool call."
    )


def received(messages: list[dict[str, Any]], stream: bool) -> Received:
    return Received("/v1/chat/completions", {"messages": messages, "stream": stream}, {}, 0.0)


def test_the_responder_calls_the_tool_until_its_result_is_in_the_request_then_answers() -> None:
    respond = tool_then_text("record", {"n": 1}, "Recorded.")
    user = [{"role": "user", "content": "go"}]
    answered = [*user, {"role": "assistant", "tool_calls": []}, {"role": "tool", "content": "{}"}]

    call = json.loads(respond(received(user, stream=False)).body)
    assert call["choices"][0]["finish_reason"] == "tool_calls"
    function = call["choices"][0]["message"]["tool_calls"][0]["function"]
    assert (function["name"], json.loads(function["arguments"])) == ("record", {"n": 1})
    text = json.loads(respond(received(answered, stream=False)).body)
    assert text["choices"][0]["message"]["content"] == "Recorded." and text["usage"]

    streamed = respond(received(user, stream=True))
    assert streamed.content_type == "text/event-stream" and b'"tool_calls"' in streamed.body
    assert b"Recorded." in respond(received(answered, stream=True)).body


@pytest.mark.parametrize("build", ["pydantic_ai", "agents_sdk"])
def test_each_frameworks_agent_alone_runs_its_one_call_turn_against_the_responder(
    build: str,
) -> None:
    """Both runs alone, one JSON completion per request and streamed, ask the fake model twice
    and end with its text: the baselines measure the turn the dres side runs."""
    pytest.importorskip("pydantic_ai" if build == "pydantic_ai" else "agents")
    from bench import framework_agents
    from rigs.providers import fake_provider
    from worker.engine import eventloop

    with fake_provider() as fake:
        fake.responder = tool_then_text(
            framework_agents.TOOL, framework_agents.ARGUMENTS, framework_agents.ANSWER
        )
        agent = getattr(framework_agents, build)(fake.url)
        for run, stream in ((agent.alone, False), (agent.streamed, True)):
            before = len(fake.received)
            eventloop.run(run(framework_agents.PROMPT), 30)
            bodies = [r.body for r in fake.received[before:]]
            assert [bool(b.get("stream")) for b in bodies] == [stream, stream], agent.name
            assert any(m.get("role") == "tool" for m in bodies[1]["messages"])
