"""The report of a full run: its header, and the RESULTS.md-style markdown (machine, versions,
the table, how each row is measured, details, noise) that keeps the sections written by hand.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from statistics import median
from typing import Any

from bench.harness import Row, cell, ratio_cell
from bench.report_notes import METHOD, NOISE


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
    return cell(values).replace("..", "–") if values else "–"


def _md_signs(text: str) -> str:
    return text.replace("<=", "≤").replace(">=", "≥")


def markdown_table(rows: Sequence[Row]) -> list[str]:
    lines = [
        "| # | row | dres | baseline | ratio [pair range] | target | verdict | which is faster |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        target = "–" if row.target_text == "-" else _md_signs(row.target_text)
        ratio = "–" if row.absolute else ratio_cell(row).replace("..", "–")
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
        "Rows 2g, 4g, 7g and S2g (issue 37) are rows 2, 4, 7 and S2 under Celery's gevent pool, "
        "in the same run: 2g in a process patched for gevent, 4g on a gevent worker after row "
        "4's prefork worker stopped, beside row 4's plain task chaining from its soft limit on "
        "prefork, never the plain hop (unpaired: the ratio of the medians). Raw data: "
        "`bench/results.json`.",
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
    gevent_pickup = result.get("pickup_gevent", {}).get("loadavg_before")
    out += [f"- {line}" for line in NOISE]
    out.append(
        f"- This run: load average {env['loadavg_start']} -> {env['loadavg_end']} "
        f"(1, 5, 15 min) on {env['cpu_count']} cores; the Celery rows started at "
        f"{result['celery']['loadavg_before_resume']} (row 4) and "
        f"{result['celery']['loadavg_before_throughput']} (row 5); row 7 started at "
        f"{result['pickup']['loadavg_before']}"
        + (f", row 7g at {gevent_pickup}." if gevent_pickup else ".")
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
            f"Row 2, dres's own CPU per call (µs, medians, Redis stubbed out): {parts}. Means per "
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
    gevent = next((row for row in by.values() if row.number == "4g"), None)
    if gevent:
        lines.append(gevent_resume_details(gevent, result.get("celery", {}).get("gevent", {})))
    for number, key in (("7", "pickup"), ("7g", "pickup_gevent")):
        pickup = [row for row in by.values() if row.absolute and row.number == number]
        if pickup:
            lines.append(pickup_details(pickup, result.get(key, {}), f"Row {number}"))
    failover = [row for row in by.values() if row.extra.get("trial_details") is not None]
    failover = [row for row in failover if row.number in ("D5", "D6")]
    if failover:
        lines.append(failover_details(failover))
    forks = [row for row in by.values() if row.number == "F1" and "events" in row.extra]
    if forks:
        lines.append(fork_details(forks))
    framework = [row for row in by.values() if row.number == "L1" and row.target is not None]
    if framework:
        lines.append(framework_details(framework, result.get("framework", {})))
    fairness = result.get("fairness", {}).get("rounds")
    if fairness:
        lines.append(fairness_details(fairness))
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


def gevent_resume_details(row: Row, info: dict[str, Any]) -> str:
    """Row 4g's line under Details: its rounds, and where its boundary's time went."""
    x = row.extra
    load = f"; load average {info['loadavg_before']} before it" if "loadavg_before" in info else ""
    return (
        f"Row 4g: {x['rounds']} rounds x {x['boundaries_per_round']} boundaries on `{x['worker']}`"
        f" (soft limit {x['soft_limit_s']:g} s, dres's timer), started once row 4's prefork "
        f"worker had stopped{load}; pooled median {x['pooled_median_ms']:.2f} ms, p90 "
        f"{x.get('pooled_p90_ms', 0):.0f} ms, {x.get('boundaries_over_100_ms', '?')} of "
        f"{x.get('boundaries', '?')} boundaries over 100 ms; run_ended -> "
        f"next run_started {x['dres_handoff_ms']:.2f} ms, run_started -> first model_start "
        f"{x['dres_startup_ms']:.2f} ms."
    )


def fork_details(rows: Sequence[Row]) -> str:
    """Row F1's line under Details: per length, the request's own call and the first model call
    (a fork's first run reads the inherited turns before it), fork / plain, medians in ms."""
    parts = []
    for row in rows:
        x = row.extra
        call, model = x["median_call_ms"], x["median_to_first_model_start_ms"]
        parts.append(
            f"{x['events']:,} events: the call {call['fork']:.2f} / {call['plain']:.2f} ms, the "
            f"first model_start {model['fork']:.1f} / {model['plain']:.1f} ms"
        )
    return (
        f"Row F1 ({rows[0].extra['rounds']} rounds; fork / plain turn): " + "; ".join(parts) + "."
    )


def framework_details(rows: Sequence[Row], info: dict[str, Any]) -> str:
    """Row L1's line under Details: per framework, a tool call's p50 by dres and by the agent
    alone (the target rows'), then a turn of one call's p50s of dres, the agent alone and the
    agent alone streamed (medians over the blocks, ms), and dres's price per such turn."""
    parts = []
    for row in rows:
        name = row.extra["framework"]
        p50 = info.get(name, {}).get("p50", {})
        streamed = p50.get("streamed")
        head = f"{name}: a tool call {median(row.dres):.1f} ms by dres, {median(row.raw):.1f} alone"
        if "dres" not in p50:
            parts.append(head)
            continue
        dres, alone = median(p50["dres"]), median(p50["alone"])
        parts.append(
            f"{head}; a turn of one call: dres {dres:.1f} ms, alone {alone:.1f} ms"
            + (f", alone streamed {median(streamed):.1f} ms" if streamed else "")
            + f"; dres's price {dres - alone:.1f} ms a turn of one tool call"
        )
    versions = _fmt(info["versions"]) if "versions" in info else "?"
    return f"Row L1 ({rows[0].extra.get('turns_per_side', '?')} turns a side; {versions}): " + (
        "; ".join(parts) + "."
    )


def fairness_details(rounds: Sequence[dict[str, dict[str, Any]]]) -> str:
    """Row Q1's line under Details: per round and case, B's waits, the pool's fill, the wall."""
    parts = []
    for n, cases in enumerate(rounds):
        for case, x in cases.items():
            waits = x["b_wait_ms"]
            parts.append(
                f"round {n + 1} {case}: B waited {min(waits):.0f}–{max(waits):.0f} ms, its "
                f"turns took {_fmt(sorted(x['b_duration_ms'])[len(waits) // 2])} ms (median); "
                f"A {x['a_at_once_most']} at once at most ({x['a_at_once_mean']} on average, "
                f"{x['a_ended_per_s']} ended/s), {x['a_not_started_at_b']} not started "
                f"when B's first was recorded, enqueued in {x['a_enqueue_s']} s; all ended "
                f"{x['wall_s']} s after the first enqueue"
            )
    return "Row Q1: " + "; ".join(parts) + "."


def pickup_details(rows: Sequence[Row], info: dict[str, Any], label: str = "Row 7") -> str:
    """Row 7's (or 7g's, ``label``) line under Details: the settings, then per case the trials
    and their figures."""
    settings = info.get("settings") or rows[0].extra.get("settings", {})
    cases = []
    for row in rows:
        x = row.extra
        figures = ", ".join(f"{t['pickup_s']:.2f}" for t in x["trial_details"])
        cases.append(
            f"{row.name.removeprefix('crash pickup, ')}: {x['trials']} trials [{figures}] s, "
            f"max {max(row.dres):.2f} s, {x['over_target']} over {row.limit:g} s, "
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
    return f"{label} (settings: {_fmt(settings)}{extra}): " + "; ".join(cases) + "."


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
