"""What every group of bench rows shares: the row, its figures and table, the private
redis-server, the machine and versions, and how a group is registered with ``python -m bench``.

A row module imports this module and nothing of the orchestration: it measures, returns
``Row``s (and a dict of what else it saw), and offers a ``Group`` that ``bench.__main__`` lists
once (``GROUPS``), which gives it ``--only NAME`` and a place in the full run.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from importlib import metadata
from pathlib import Path
from typing import Any

import redis

from worker.dev.redis_server import RedisServer

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
#: the Celery options of a gevent worker (issue 37: rows 2g, 4g, 7g and S2g run under it)
GEVENT = ("-P", "gevent")


@dataclass
class Row:
    """One figure of dres beside its baseline.

    ``ratio``: the median of the per-pair ratios when the samples were taken in interleaved
    pairs (each dres sample beside the baseline sample taken next to it, so that a burst of host
    load weighs on both sides of a pair), else median(dres) / median(raw). With few pairs of
    unequal length (row 4: a dres round lasts ~16 s, a hop round ~0.3 s) the ratio of the
    medians pairs figures from different moments; both are reported.

    A row without a baseline (``raw`` empty: row 7's crash pickup) is an absolute figure: no
    ratio, and its verdict reads ``limit``, a bound on the median dres figure in the row's unit.
    """

    name: str
    unit: str
    dres: list[float]
    raw: list[float]
    target: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: throughput-like rows: a larger figure is better (ratios < 1 mean dres is slower)
    higher_is_better: bool = False
    #: the row's number in ``make bench``'s table (1-6); "" for a row only shown standalone
    number: str = ""
    #: what the baseline is, in a few words (the markdown report's legend)
    baseline: str = "raw redis-py"
    #: a row without a baseline: the bound on its median figure (<=, or >= when higher is
    #: better), in the row's unit; None: an information row
    limit: float | None = None

    @property
    def absolute(self) -> bool:
        """No baseline: the figure stands on its own against ``limit``."""
        return not self.raw

    @property
    def ratio(self) -> float:
        pairs = self.pair_ratios
        return statistics.median(pairs) if pairs else self.ratio_of_medians

    @property
    def ratio_of_medians(self) -> float:
        raw = statistics.median(self.raw)
        return statistics.median(self.dres) / raw if raw else math.inf

    @property
    def paired(self) -> bool:
        """Samples were taken in interleaved pairs (else only the medians compare)."""
        return len(self.dres) == len(self.raw) and not self.extra.get("unpaired", False)

    @property
    def pair_ratios(self) -> list[float]:
        if not self.paired:
            return []
        return [d / r if r else math.inf for d, r in zip(self.dres, self.raw, strict=True)]

    @property
    def verdict(self) -> str:
        if self.absolute:
            if self.limit is None:
                return "info"
            return "meets" if self.within(statistics.median(self.dres)) else "misses"
        if self.target is None:
            return "info"
        return "meets" if self.ratio <= self.target else "misses"

    def within(self, value: float) -> bool:
        """``value`` keeps to the absolute ``limit`` (rows without a baseline)."""
        if self.limit is None:
            return True
        return value >= self.limit if self.higher_is_better else value <= self.limit

    @property
    def target_text(self) -> str:
        """The target as a table shows it: ``<= 1.3`` (a ratio) or ``<= 15 s`` (absolute)."""
        if self.absolute:
            if self.limit is None:
                return "-"
            sign = ">=" if self.higher_is_better else "<="
            return f"{sign} {self.limit:g} {self.unit}"
        return "-" if self.target is None else f"<= {self.target}"

    @property
    def wording(self) -> str:
        """Which is faster and by how much, e.g. ``dres slower by 1.25x``; for a row without a
        baseline, how many of its samples keep to its limit, e.g. ``no baseline; 5/5 <= 15 s``."""
        if self.absolute:
            if self.limit is None:
                return "no baseline"
            kept = sum(1 for x in self.dres if self.within(x))
            return f"no baseline; {kept}/{len(self.dres)} {self.target_text}"
        ratio = self.ratio
        dres_faster = ratio > 1 if self.higher_is_better else ratio < 1
        if ratio <= 0 or math.isinf(ratio):  # a side at zero: no factor to tell
            return f"dres {'faster' if dres_faster else 'slower'}: one side is 0"
        factor = max(ratio, 1 / ratio)
        if factor < 1.005:
            return "same"
        return f"dres {'faster' if dres_faster else 'slower'} by {factor:.2f}x"

    def as_dict(self) -> dict[str, Any]:
        pairs = self.pair_ratios
        absolute = self.absolute
        return {
            "number": self.number,
            "name": self.name,
            "unit": self.unit,
            "baseline": self.baseline,
            "dres": summary(self.dres),
            "raw": None if absolute else summary(self.raw),
            "ratio": None if absolute else self.ratio,
            "ratio_of_medians": None if absolute else self.ratio_of_medians,
            "pair_ratio_min": min(pairs) if pairs else None,
            "pair_ratio_max": max(pairs) if pairs else None,
            "higher_is_better": self.higher_is_better,
            "target_ratio_max": self.target,
            **({"target_limit": self.limit} if absolute else {}),
            "verdict": self.verdict,
            "wording": self.wording,
            "dres_samples": self.dres,
            "raw_samples": self.raw,
            **self.extra,
        }


def summary(values: Sequence[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


# -- timing -------------------------------------------------------------------------------------


def time_each(call: Callable[[Any], object], items: Sequence[Any]) -> list[int]:
    """Nanoseconds of ``call(item)`` for each item, the call alone."""
    clock = time.perf_counter_ns
    out = []
    for item in items:
        start = clock()
        call(item)
        out.append(clock() - start)
    return out


def progress(started: float, what: str) -> None:
    """A line on stderr: the seconds since ``started`` (``time.monotonic``) and what runs now."""
    print(f"[{time.monotonic() - started:5.1f} s] {what} ...", file=sys.stderr, flush=True)


def percentile(samples: Sequence[int], q: float) -> float:
    ordered = sorted(samples)
    return float(ordered[min(len(ordered) - 1, int(q * len(ordered)))])


# -- the table ----------------------------------------------------------------------------------


def _num(value: float) -> str:
    if value >= 1000:
        return f"{value:,.0f}"
    return f"{value:.1f}" if value >= 100 else f"{value:.2f}"


def cell(values: Sequence[float]) -> str:
    """``median [min..max]`` of a row's samples, as the tables show them."""
    if not values:
        return "-"
    return f"{_num(statistics.median(values))} [{_num(min(values))}..{_num(max(values))}]"


def ratio_cell(row: Row) -> str:
    if row.absolute:
        return "-"
    ratios = row.pair_ratios
    spread = f" [{min(ratios):.2f}..{max(ratios):.2f}]" if ratios else " (unpaired)"
    return f"{row.ratio:.2f}{spread}"


def table_lines(rows: Sequence[Row]) -> list[str]:
    """The rows as an aligned text table (with the row numbers when the rows carry them)."""
    numbered = any(row.number for row in rows)
    head = ("row", "dres", "baseline", "ratio", "target", "verdict", "which is faster")
    table = [("#", *head) if numbered else head]
    for row in rows:
        cells = (
            f"{row.name} ({row.unit})",
            cell(row.dres),
            cell(row.raw),
            ratio_cell(row),
            row.target_text,
            row.verdict,
            row.wording,
        )
        table.append((row.number, *cells) if numbered else cells)
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in table
    ]
    return [lines[0], "-" * max(len(line) for line in lines), *lines[1:]]


def misses(rows: Sequence[Row]) -> list[str]:
    return [
        f"{row.name} median {_num(statistics.median(row.dres))} {row.unit}, not {row.target_text}"
        if row.absolute
        else f"{row.name} ratio {row.ratio:.2f} > {row.target}"
        for row in rows
        if row.verdict == "misses"
    ]


def write_result(path: Path, plan: Any, info: dict[str, Any], rows: Sequence[Row]) -> None:
    """A group's JSON: its plan (a dataclass), what else it saw, and its rows."""
    result = {"plan": asdict(plan), "info": info, "rows": [row.as_dict() for row in rows]}
    path.write_text(json.dumps(result, indent=2) + "\n")


# -- the server, the machine, the versions -------------------------------------------------------


def private_redis() -> RedisServer:
    """A redis-server of the bench's own (AOF on, ``appendfsync everysec``, a free port)."""
    return RedisServer(appendfsync="everysec")


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def environment(client: redis.Redis) -> dict[str, Any]:
    """The date, Python, the server behind ``client`` and the libraries between them."""
    server = client.info("server")
    fsync = client.config_get("appendfsync").get("appendfsync", "?")
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "redis_server": server.get("redis_version", "?"),
        "appendfsync": fsync,
        "redis_py": redis.__version__,
        "hiredis": version("hiredis"),
        "hiredis_parser": bool(redis.utils.HIREDIS_AVAILABLE),
        "pydantic": version("pydantic"),
        "pydantic_core": version("pydantic-core"),
        "cpu_count": os.cpu_count(),
        "loadavg_start": loadavg(),
    }


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


def machine_environment(client: redis.Redis) -> dict[str, Any]:
    """``environment`` and the machine: CPU, memory, kernel, Celery's libraries, dres's commit."""
    env = environment(client)
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
        celery=version("celery"),
        kombu=version("kombu"),
        billiard=version("billiard"),
        dres_commit=_git("rev-parse", "--short", "HEAD") + (" (modified)" if dirty else ""),
    )
    return env


# -- a group of rows, as python -m bench knows it ------------------------------------------------


def info_line(rows: Sequence[Row], info: dict[str, Any]) -> list[str]:
    """A group's ``summary``: what else it saw, as one line of JSON (its plan left out)."""
    return [json.dumps({k: v for k, v in info.items() if k != "plan"})]


#: a group's plan: a dataclass of how much it measures (``FULL``, ``QUICK``)
Plan = Any
#: a group's measurement of a plan: its rows, and what else it saw (``info``)
Measured = tuple[list[Row], dict[str, Any]]


@dataclass(frozen=True)
class Group:
    """A group of rows with servers of its own: ``python -m bench --only NAME`` runs it alone
    (``main``, given ``--quick``, ``--json PATH`` and the ``forward``ed options), the full run
    runs ``measure`` after rows 1-7 and keeps its info under ``NAME`` in results.json.

    Both measure the plan ``plan`` makes (``quick`` or ``full``, with the group's ``options``
    set from the command line) with ``run``; ``main`` is every group's command line, so that
    ``python -m bench.X`` and ``python -m bench --only NAME`` take, print and write the same."""

    #: ``--only NAME``; its key in results.json; its JSON alone is ``results-NAME.json``
    name: str
    #: which rows, in a line (``--only``'s listing and the full run's progress)
    about: str
    #: the rows of a plan, on servers the group starts and stops itself
    run: Callable[[Plan], Measured]
    #: the plans of a full run and of ``--quick``
    full: Plan
    quick: Plan
    #: the module's docstring: ``--help`` of ``python -m bench.MODULE``
    doc: str | None = None
    #: fields of the plan its own command line sets (``--FIELD N``, a whole number >= 1), with
    #: their help; those ``python -m bench`` also takes are passed on (``forward``)
    options: tuple[tuple[str, str], ...] = ()
    #: lines printed after the table, from the rows and what else the group saw
    summary: Callable[[list[Row], dict[str, Any]], list[str]] | None = None

    @property
    def forward(self) -> tuple[str, ...]:
        """Options passed on to ``main`` when ``python -m bench`` takes and is given them
        (``--turns N``)."""
        return tuple(name for name, _ in self.options)

    def plan(self, args: argparse.Namespace) -> Plan:
        """``quick`` or ``full``, with each of ``options`` that ``args`` sets."""
        plan = self.quick if args.quick else self.full
        given = {name: getattr(args, name, None) for name, _ in self.options}
        given = {name: value for name, value in given.items() if value is not None}
        return replace(plan, **given) if given else plan

    def measure(self, args: argparse.Namespace) -> Measured:
        """The full run's call, ``args`` those of ``python -m bench``."""
        return self.run(self.plan(args))

    def main(self, argv: Sequence[str] | None = None) -> int:
        """The group alone: printed, and its JSON written (``results-NAME.json`` by default)."""
        module = Path(getattr(sys.modules.get(self.run.__module__), "__file__", "") or "").stem
        parser = argparse.ArgumentParser(prog=f"python -m bench.{module}", description=self.doc)
        parser.add_argument("--quick", action="store_true", help="few, short repeats: a smoke test")
        default = HERE / f"results-{self.name}.json"
        parser.add_argument("--json", metavar="PATH", type=Path, default=default)
        for name, text in self.options:
            parser.add_argument(f"--{name}", metavar="N", type=int, help=text)
        args = parser.parse_args(argv)
        for name, _ in self.options:
            if getattr(args, name) is not None and getattr(args, name) < 1:
                parser.error(f"--{name} must be at least 1")
        plan = self.plan(args)
        started = time.monotonic()
        progress(started, self.about)
        rows, info = self.run(plan)
        info.setdefault("elapsed_s", round(time.monotonic() - started, 1))
        print("\n".join(table_lines(rows)))
        if self.summary is not None:
            print("\n".join(self.summary(rows, info)))
        write_result(args.json, plan, info, rows)
        print(f"elapsed {info['elapsed_s']} s; wrote {args.json}")
        return 0
