"""Row L1 of ``make bench`` (issue 48): the price of durability per tool call inside a framework's
agent. Turns run by dres beside the same agent run alone, per framework: turns of one tool call
and turns of ``CALLS``; a tool call's own time on each side is what a turn of ``CALLS`` calls takes
beyond a turn of one, per call (the target row, <= 1.5 at p50); the one-call turns, whose fixed
costs (dres's create, claim and end) that leaves out, are rows for information.

The agent (``bench.framework_agents``): one of the framework's own, with one tool (``record``, a
no-op write) and an OpenAI chat model pointed at ``rigs.providers``' fake OpenAI-compatible server
on loopback, in a process of its own as a model provider is (in this one, its serving took the GIL
from the turns measured), which answers each conversation's first request with a call of
``record`` and its second (the call's result in it) with a short text (``tool_then_text``): two
model round trips and one tool call a turn, on every side.

- alone: ``await agent.run(PROMPT)`` (pydantic-ai) or ``await Runner.run(agent, PROMPT,
  run_config=RunConfig(tracing_disabled=True))`` (the Agents SDK), on the process's event loop
  (``worker.engine.eventloop``), timed around the ``await`` itself on that loop;
- dres: the same agent object as a dres turn on a private redis-server (AOF on, ``appendfsync
  everysec``), through a worker's own runtime (``Runtime``): ``Lifecycle.create`` of the turn,
  then ``Lifecycle.run_chunk`` with the worker's ``AgentLoop`` for it (heartbeat, Stop polls, the
  process's event cache) whose ``frameworks`` names the framework's adapter
  (``PydanticAiAdapter(agent)``, ``AgentsSdkAdapter(agent)``): the agent runs on the same loop,
  its model calls recorded (``model_start``, ``text``, ``model_done``), its tool call decided and
  recorded by dres's executor. Timed from before the create to ``run_chunk``'s return, the
  ``turn_ended`` recorded; every turn's status is read afterwards (outside the time) and a turn
  that did not complete fails the row.

The fake server answers a request as it asks: the runs alone ask for one JSON completion each,
dres's adapters for a stream (to record the text as it comes); so a third side, for information:
- streamed: the same run alone with every model request streamed (pydantic-ai's
  ``event_stream_handler``, the SDK's ``Runner.run_streamed`` with its events read).

Blocks of each side's turns in a row, their order turning round from block to block (dres, alone,
streamed; alone, streamed, dres; ...), after an uncounted warm-up block; per block the p50 and
p99 of its turns (ms); each block's model requests counted (two a turn, or the row fails). Rows:
dres / alone at p50 (target <= 1.5) and p99, dres / streamed at p50 (information), and dres's
price per turn of one call, the block's p50 dres - p50 alone (ms, information). The Agents SDK's
dres side runs once its adapter (``worker.engine.frameworks.openai_agents_loop``) is there; until
then its row is the agent alone, saying why.

Run alone: ``python -m bench --only framework [--quick]`` or ``python -m bench.framework_bench``.
"""

from __future__ import annotations

import gc
import re
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from bench.apart import served_apart
from bench.framework_agents import (
    ANSWER,
    ARGUMENTS,
    CALLS,
    FRAMEWORKS,
    PROMPT,
    PROMPT_MANY,
    TOOL,
    Framework,
    Run,
)
from bench.harness import Group, Row, loadavg, percentile, private_redis, version
from rigs.providers import fake_provider, tool_then_text
from worker.base.logging import configure_logging
from worker.base.settings import load_settings
from worker.edges.runtime import Runtime
from worker.engine import eventloop
from worker.engine.frameworks.base import Adapter

ABOUT = "row L1: a tool call inside a framework agent, run by dres vs the agent alone"
#: dres / the agent alone, per tool call at p50 (issue 48)
TARGET = 1.5
#: seconds a turn may take at most, either side
TURN_S = 60.0
#: dres's turn, the agent alone, the agent alone with its requests streamed (turns of one call);
#: dres's turn and the agent alone on turns of CALLS calls
SIDES = ("dres", "alone", "streamed", "dres_many", "alone_many")
#: the sides whose turns make CALLS calls (the rest one)
MANY = frozenset({"dres_many", "alone_many"})


@dataclass(frozen=True)
class FrameworkPlan:
    #: counted blocks (one uncounted warm-up block first)
    blocks: int
    #: turns of each side per block
    turns: int


FULL = FrameworkPlan(blocks=30, turns=20)
QUICK = FrameworkPlan(blocks=2, turns=8)


def calls_asked(message: str) -> int:
    """How many calls a turn's message asks the fake model to make (``record N things``)."""
    found = re.search(r"record (\d+) things", message)
    return int(found.group(1)) if found else 1


def _serve(conn: Connection) -> None:
    """The fake model server's process: its URL sent, then on each ask the count of requests
    it answered since the last (``count``), until ``stop``."""
    with fake_provider() as fake:
        fake.responder = tool_then_text(TOOL, ARGUMENTS, ANSWER, calls=calls_asked)
        conn.send(fake.url)
        while conn.recv() == "count":
            with fake.changed:
                conn.send(len(fake.received))
                fake.received.clear()


def provider_apart() -> AbstractContextManager[tuple[str, Callable[[], int]]]:
    """``rigs.providers``' fake server in a process of its own, as a model provider is: (its
    URL, how many requests it answered since the last ask). Stopped whatever happens."""
    return served_apart(_serve, "fake-model", "the fake model server")


def time_alone(run: Run, prompt: str = PROMPT) -> float:
    """One run of the agent alone, in ms, timed on the loop around its ``await``."""

    async def timed() -> float:
        started = time.perf_counter()
        await run(prompt)
        return (time.perf_counter() - started) * 1000

    ms: float = eventloop.run(timed(), TURN_S)
    return ms


def time_dres(rt: Runtime, adapter: Adapter, prompt: str = PROMPT) -> tuple[float, str]:
    """One turn of the agent run by dres, create -> run_chunk's return, in ms; and its turn id."""
    started = time.perf_counter()
    turn = rt.lifecycle.create(prompt, mode="foreground")
    loop = rt.loop(turn.turn_id, interrupts=())
    loop.frameworks = lambda name: adapter
    with loop.guard.limited(None):
        rt.lifecycle.run_chunk(turn.turn_id, turn.run_id, loop, interrupts=())
    return (time.perf_counter() - started) * 1000, turn.turn_id


def completed(rt: Runtime, turn_id: str) -> None:
    """The turn completed: a row of turns that failed would measure nothing."""
    meta = rt.lifecycle.store.meta(turn_id)
    if meta.status != "completed":
        events = [e.type for e in rt.ledger.events(turn_id)]
        raise RuntimeError(f"row L1: turn {turn_id} ended {meta.status}: {events}")


@dataclass
class Samples:
    """One framework's per-block figures (ms) of each side measured."""

    p50: dict[str, list[float]]
    p99: dict[str, list[float]]
    #: turns of each side counted
    turns: int = 0


def one_turn(rt: Runtime, framework: Framework, side: str) -> float:
    prompt = PROMPT_MANY if side in MANY else PROMPT
    if side in ("alone", "alone_many"):
        return time_alone(framework.alone, prompt)
    if side == "streamed":
        return time_alone(framework.streamed, prompt)
    assert framework.adapter is not None
    took, turn_id = time_dres(rt, framework.adapter, prompt)
    completed(rt, turn_id)
    return took


def measure_framework(
    rt: Runtime, requests: Callable[[], int], framework: Framework, plan: FrameworkPlan
) -> Samples:
    """The framework's blocks: each side's turns in a row, the sides' order turning round from
    block to block; the warm-up block (-1) not counted."""
    sides = SIDES if framework.adapter is not None else ("alone", "streamed", "alone_many")
    samples = Samples({s: [] for s in sides}, {s: [] for s in sides})
    for block in range(-1, plan.blocks):
        shift = block % len(sides)
        for side in sides[shift:] + sides[:shift]:
            requests()
            gc.collect()
            ms = [one_turn(rt, framework, side) for _ in range(plan.turns)]
            answered = requests()
            each = CALLS + 1 if side in MANY else 2
            if answered != each * plan.turns:
                raise RuntimeError(
                    f"row L1 ({framework.name}, {side}): {answered} model requests "
                    f"for {plan.turns} turns, not {each} each"
                )
            if block >= 0:
                samples.p50[side].append(statistics.median(ms))
                samples.p99[side].append(percentile([round(x * 1000) for x in ms], 0.99) / 1000)
    samples.turns = plan.blocks * plan.turns
    return samples


def framework_rows(framework: Framework, samples: Samples, info: dict[str, Any]) -> list[Row]:
    """One framework's rows: dres / the agent alone at p50 (the target) and p99, dres / the
    agent alone streamed at p50, and dres's price per turn in ms (p50 dres - p50 alone)."""
    name, call = framework.name, framework.call
    what = f"{name}: a turn with one tool call, run by dres vs the agent alone"
    base = f"the same {name} agent alone ({call}), same fake model and tool"
    extra = {"framework": name, **info}
    p50, p99 = samples.p50, samples.p99
    if "dres" not in p50:
        extra["dres_missing"] = framework.missing
        return [
            Row(f"{name}: a turn with one tool call, the agent alone ({call}; dres not "
                f"measured: {framework.missing})", "ms", p50["alone"], [], None, extra,
                number="L1", baseline="-"),
        ]  # fmt: skip
    price = [d - a for d, a in zip(p50["dres"], p50["alone"], strict=True)]
    per_call = {
        side: [
            (many - one) / (CALLS - 1)
            for many, one in zip(p50[f"{side}_many"], p50[side], strict=True)
        ]
        for side in ("dres", "alone")
    }
    return [
        Row(f"{name}: a tool call inside the agent, run by dres vs the agent alone (a turn of "
            f"{CALLS} calls less a turn of one, per call), p50", "ms", per_call["dres"],
            per_call["alone"], TARGET, extra, number="L1", baseline=base),
        Row(f"{what}, p50", "ms", p50["dres"], p50["alone"], None, extra, number="L1",
            baseline=base),
        Row(f"{what}, p99", "ms", p99["dres"], p99["alone"], None, extra, number="L1",
            baseline=base),
        Row(f"{what} with its model requests streamed (as dres asks for them), p50", "ms",
            p50["dres"], p50["streamed"], None, extra, number="L1",
            baseline=f"the same agent alone, streamed ({call} with its events read)"),
        Row(f"{name}: dres's price per turn of one tool call (p50 dres - p50 alone)", "ms",
            price, [], None, extra, number="L1", baseline="-"),
    ]  # fmt: skip


def measure(plan: FrameworkPlan) -> tuple[list[Row], dict[str, Any]]:
    """Row L1 on a redis-server and a fake model server of its own."""
    info: dict[str, Any] = {
        "blocks": plan.blocks,
        "turns_per_block": plan.turns,
        "versions": {dist: version(dist) for dist, _ in FRAMEWORKS} | {"openai": version("openai")},
        "loadavg_start": loadavg(),
    }
    rows: list[Row] = []
    configure_logging("WARNING")
    with private_redis() as server, provider_apart() as (url, requests):
        rt = Runtime.from_settings(load_settings(redis_url=server.url))
        try:
            for _, build in FRAMEWORKS:
                framework = build(url)
                samples = measure_framework(rt, requests, framework, plan)
                seen = {"turns_per_side": samples.turns}
                info[framework.name] = {**seen, "p50": samples.p50, "p99": samples.p99}
                rows += framework_rows(framework, samples, seen)
        finally:
            rt.redis.close()
    info["loadavg_end"] = loadavg()
    return rows, info


def summary(rows: list[Row], info: dict[str, Any]) -> list[str]:
    lines = [""]
    for row in rows:
        name = row.extra["framework"]
        if row.target is not None:
            dres, alone = statistics.median(row.dres), statistics.median(row.raw)
            lines.append(
                f"{name}: a tool call's p50 dres / alone {dres:.2f} / {alone:.2f} ms (ratio of the "
                f"medians {row.ratio_of_medians:.2f}): dres's price {dres - alone:.2f} ms a call"
            )
        elif row.extra.get("dres_missing"):
            lines.append(f"{name}: dres not measured: {row.extra['dres_missing']}")
    lines.append(f"versions {info['versions']}")
    lines.append(f"load average {info['loadavg_start']} -> {info['loadavg_end']}")
    return lines


GROUP = Group(
    "framework", ABOUT, measure, FULL, QUICK, __doc__,
    options=(("blocks", f"counted blocks (default {FULL.blocks})"),), summary=summary,
)  # fmt: skip
main = GROUP.main


if __name__ == "__main__":
    sys.exit(main())
