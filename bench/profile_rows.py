"""Where rows 2 and 4 spend their time, and what a turn asks Redis: the evidence behind issue 27.

Three reports, each written under ``bench/profiles/`` with a label (``before``, ``after``):

- ``tool-call``: cProfile of row 2's recording (``bench.tool_call_bench.record_call``) against a
  private redis-server, the functions by own time (text).
- ``resume``: py-spy records a real worker's pool processes while a turn crosses chunk
  boundaries at the soft limit (row 4's round); py-spy leaves idle threads out, so what it
  records is the work around the boundaries. A flame graph (SVG) and, as text, the tree under
  ``ChunkPath.run_chunk`` (samples at 2 kHz, summed over the boundaries).
- ``commands``: ``MONITOR`` on the same kind of worker: every command that names one turn
  (its keys, its scripts, its chunk messages), for a turn of two tool calls and for a turn of
  two chunk boundaries, listed in order, with the counts per tool call and per boundary.

py-spy is not a dependency: ``uv pip install --target DIR py-spy`` and pass ``--py-spy``.
Run from the project root: ``.venv/bin/python -m bench.profile_rows LABEL [--py-spy PATH]``.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import io
import pstats
import re
import signal
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis

from bench.celery_worker import running_worker, wait_turns
from bench.harness import private_redis
from bench.ledger_turns import open_turn
from bench.resume_bench import dres_resume_round, resume_script
from bench.throughput_bench import throughput_script
from bench.tool_call_bench import call_data, record_call
from ledger.store import Ledger
from rigs import write_script
from worker.base.clock import RandomIds, SystemClock
from worker.edges.runtime import Runtime
from worker.engine.recorder import Recorder, RunContext
from worker.engine.tools.guard import DeferSignals

OUT = Path("bench/profiles")
#: row 4's profile: boundaries recorded
BOUNDARIES = 60


def tool_call(label: str) -> None:
    server = private_redis()
    server.start()
    try:
        client = redis.Redis.from_url(server.url)
        ledger = Ledger(client)
        recorder = Recorder(
            ledger, RunContext(open_turn(ledger, "profile")), SystemClock(), RandomIds(), []
        )
        guard = DeferSignals()
        guard.arm()
        calls = [call_data(recorder, n) for n in range(3000)]
        for data in calls[:500]:  # warm-up
            record_call(recorder, guard, data)
        recorder.events = []
        profile = cProfile.Profile()
        profile.enable()
        for data in calls:
            record_call(recorder, guard, data)
        profile.disable()
        text = io.StringIO()
        stats = pstats.Stats(profile, stream=text)
        stats.sort_stats("tottime").print_stats(30)
        header = f"row 2, {len(calls)} tool calls recorded against a private redis-server\n"
        write(f"tool-call-{label}.txt", header + text.getvalue())
    finally:
        server.stop()


def resume(label: str, py_spy: str) -> None:
    server = private_redis()
    server.start()
    try:
        with running_worker(server.url) as (rt, worker, tmp):
            dres_resume_round(rt, write_script(tmp / "warm.json", resume_script(2)), 2)
            model = write_script(tmp / "resume.json", resume_script(BOUNDARIES))
            OUT.mkdir(parents=True, exist_ok=True)
            folded = tmp / "resume.folded"
            outputs = [(folded, "raw"), (OUT / f"resume-{label}.svg", "flamegraph")]
            record = [py_spy, "record", "--pid", str(worker.pid), "--subprocesses"]
            spies = [
                subprocess.Popen(
                    [*record, "--rate", "2000", "--format", fmt, "--output", str(path)],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                for path, fmt in outputs
            ]
            try:
                result = dres_resume_round(rt, model, BOUNDARIES)
            finally:
                for spy in spies:
                    spy.send_signal(signal.SIGINT)
                    spy.wait(60)
            latency = sorted(result.latency)[len(result.latency) // 2] * 1000
            header = (
                f"row 4, {len(result.latency)} chunk boundaries, median {latency:.2f} ms "
                "(under py-spy); samples at 2 kHz under ChunkPath.run_chunk, 3 levels\n"
            )
            write(f"resume-{label}.txt", header + tree(folded.read_text(), "ChunkPath.run_chunk"))
    finally:
        server.stop()


def tree(folded: str, root: str, depth: int = 3, least: int = 5) -> str:
    """The samples under the first frame named ``root``, by call path, ``depth`` levels deep."""
    counts: collections.Counter[tuple[str, ...]] = collections.Counter()
    for line in folded.splitlines():
        stack, _, n = line.rpartition(" ")
        frames = [re.sub(r" \((?:.*site-packages/)?(.*?):\d+\)$", r" (\1)", f)
                  for f in stack.split(";")]  # fmt: skip
        at = next((i for i, f in enumerate(frames) if root in f), None)
        if at is None:
            continue
        path = tuple(frames[at + 1 : at + 1 + depth])
        counts[()] += int(n)
        for d in range(1, len(path) + 1):
            counts[path[:d]] += int(n)
    lines = [
        f"{n:6d} {'  ' * len(path)}{path[-1] if path else root}"
        for path, n in sorted(counts.items())
        if n >= least
    ]
    return "\n".join(lines) + "\n"


@contextmanager
def monitored(url: str) -> Iterator[list[tuple[str, bool, str]]]:
    """Every command the server runs meanwhile, as MONITOR prints it, whether a script ran it
    (not a round trip of its own), and the connection that sent it."""
    seen: list[tuple[str, bool, str]] = []
    client = redis.Redis.from_url(url)
    ready = threading.Event()

    def listen() -> None:
        with client.monitor() as monitor:
            ready.set()
            for command in monitor.listen():
                lua = command.get("client_type") == "lua"
                seen.append((str(command["command"]), lua, str(command.get("client_port"))))
                if "profile-rows-stop" in seen[-1][0]:
                    return

    thread = threading.Thread(target=listen, daemon=True)
    thread.start()
    ready.wait(10)
    try:
        yield seen
    finally:
        client.get("profile-rows-stop")
        thread.join(10)
        client.close()


def commands(label: str) -> None:
    server = private_redis()
    server.start()
    try:
        with running_worker(server.url) as (rt, _worker, tmp):
            calls_model = write_script(tmp / "calls.json", throughput_script(2))
            resume_model = write_script(tmp / "resume.json", resume_script(2))
            dres_resume_round(rt, resume_model, 2)  # warm-up: every pool process, both paths
            lines = [f"# Redis commands of one turn ({label})", ""]
            for name, model in (
                ("two tool calls", calls_model),
                ("two chunk boundaries", resume_model),
            ):
                with monitored(server.url) as seen:
                    turn_id = run_turn(rt, model, name)
                mine = of_turn(seen, turn_id)
                sent = collections.Counter(command_name(c) for c, lua in mine if not lua)
                lines += [
                    f"## A turn of {name}: {sum(sent.values())} commands sent "
                    f"({len(mine) - sum(sent.values())} more run by its scripts)",
                    "",
                ]
                lines += [f"- {n} x {c}" for c, n in sent.most_common()]
                lines += ["", "In order (indented: run by a script):", ""]
                lines += [f"    {'    ' if lua else ''}{short(c)}" for c, lua in mine]
                lines.append("")
            write(f"commands-{label}.md", "\n".join(lines))
    finally:
        server.stop()


#: commands that name no key but go with one that does, on the same connection
FRAMING = ("MULTI", "EXEC", "SCRIPT")


def of_turn(seen: list[tuple[str, bool, str]], turn_id: str) -> list[tuple[str, bool]]:
    """The commands that name the turn, with the transactions and script checks around them
    (``MULTI``/``EXEC``, ``SCRIPT EXISTS``: sent by the same connection next to one of them)."""
    by_port: dict[str, list[int]] = collections.defaultdict(list)
    for i, (_, lua, port) in enumerate(seen):
        if not lua:
            by_port[port].append(i)
    mine: list[tuple[str, bool]] = []
    for i, (command, lua, port) in enumerate(seen):
        if not lua and command_name(command) in FRAMING:
            sent = by_port[port]
            at = sent.index(i)
            near = [seen[j][0] for j in sent[max(at - 1, 0) : at + 2] if j != i]
            if not any(turn_id in c for c in near):
                continue
        elif turn_id not in command:
            continue
        mine.append((command, lua))
    return mine


def run_turn(rt: Runtime, model: str, what: str) -> str:
    turn_id = rt.lifecycle.enqueue(f"profile: {what}", mode="foreground", model=model).turn_id
    wait_turns(rt, [turn_id], 120)
    return turn_id


def command_name(line: str) -> str:
    return line.split(" ", 1)[0].strip('"').upper()


def short(line: str, width: int = 140) -> str:
    return line if len(line) <= width else line[: width - 3] + "..."


def write(name: str, text: str) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / name).write_text(text)
    print(f"wrote {OUT / name}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile_rows", description=__doc__)
    parser.add_argument("label", help="before, after, ...")
    parser.add_argument("--py-spy", help="the py-spy binary (the resume profile needs it)")
    parser.add_argument("--only", choices=("tool-call", "resume", "commands"))
    args = parser.parse_args(argv)
    todo: dict[str, Any] = {
        "tool-call": lambda: tool_call(args.label),
        "commands": lambda: commands(args.label),
        "resume": lambda: resume(args.label, args.py_spy) if args.py_spy else None,
    }
    for name, run in todo.items():
        if args.only in (None, name):
            run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
