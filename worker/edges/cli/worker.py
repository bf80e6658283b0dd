"""``dres worker``: a Celery worker with dres's settings, and the reaper beside it.

Its pool is prefork (the default; CPU-heavy tools) or gevent (``-P gevent -c N``: many chunks,
each waiting on its model, in one process; docs/deploy.md). Each pool has its ways with its runs
(``worker.lifecycle.pools``: how a run is interrupted, the heartbeat, the flusher) and its way to
hand its chunks over at a warm shutdown (``POOLS``), chosen once here: the runtimes of the process
take it (``worker.edges.runtime.run_chunks_on``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog
from celery import Celery, signals

from worker.base import metrics
from worker.base.errors import ConfigError
from worker.base.forks import guard_forks
from worker.base.logging import configure_logging_for
from worker.base.settings import load_settings
from worker.edges.celery.greenlets import GreenletInterrupts
from worker.edges.celery.greenlets import TaskPool as GeventTaskPool
from worker.edges.celery.metrics import WorkerMetrics
from worker.edges.celery.shutdown import hand_greenlets_over_on_shutdown, hand_over_on_shutdown
from worker.edges.cli.pools import GEVENT, concurrency_option, pool_option
from worker.edges.redis.clients import expect_chunks
from worker.edges.redis.durability import check_durability
from worker.edges.redis.policy import check_stores
from worker.edges.redis.reach import wait_for_stores
from worker.edges.runtime import Runtime, run_chunks_on
from worker.engine.frameworks.loops import load_listed
from worker.engine.models import preload_sdks
from worker.engine.tools.approval import ApprovalPolicy
from worker.lifecycle.heartbeat import BatchedBeats
from worker.lifecycle.pools import Pool
from worker.lifecycle.reaper import ReaperThread

log = structlog.get_logger("dres.worker")

#: pools that can interrupt none of a chunk's waits (no soft limit, no Stop); dres refuses them
NO_SOFT_LIMIT_POOLS = {"solo", "threads", "eventlet"}


@dataclass(frozen=True, kw_only=True)
class WorkerPool(Pool):
    """A pool as ``dres worker`` runs it: its ways with its runs, and Celery's side of it."""

    #: connects what hands the running chunks over at a warm shutdown
    hand_over: Callable[[], None]
    #: Celery's pool class to run instead of the one the option names (None: Celery's choice)
    celery_pool: type | None = None


PREFORK = WorkerPool(name="prefork", hand_over=hand_over_on_shutdown)
#: the pools dres runs on; any other name Celery takes for prefork (``processes``) is prefork
POOLS = {
    "prefork": PREFORK,
    GEVENT: WorkerPool(
        name=GEVENT,
        interrupts=GreenletInterrupts,
        heartbeats=BatchedBeats,
        chunks_share_a_process=True,
        hand_over=hand_greenlets_over_on_shutdown,
        celery_pool=GeventTaskPool,
    ),
}


def _loglevel(extra: list[str]) -> str:
    """The worker's --loglevel, which dres's own logs follow too (INFO when not given)."""
    for i, arg in enumerate(extra):
        if arg in {"-l", "--loglevel"} and i + 1 < len(extra):
            return extra[i + 1].upper()
        if arg.startswith("--loglevel="):
            return arg.split("=", 1)[1].upper()
    return "INFO"


def load_before_fork(runtime: Runtime) -> None:
    """Import now, in the main process before the pool forks and before the reaper starts, what
    every chunk and sweep needs: each child starts with it (no chunk spends its time limit on a
    first import), and the reaper thread does no first import a fork could cut in half
    (``worker.base.forks``)."""
    guard_forks()
    settings = runtime.settings
    preload_sdks([settings.model, *settings.models.split(",")])
    metrics.get()
    runtime.tracer  # noqa: B018 (OTEL_*: a bad one stops the worker here; the SDK is imported now)
    # DRES_TOOLS's modules, and the MCP servers and OpenAPI documents listed now (a worker's tool
    # list is fixed for its life): a bad one stops the worker here, with one line naming it
    tools = runtime.registry.names()
    # DRES_APPROVAL may name only registered write tools: refused here, not in every chunk
    ApprovalPolicy.from_settings(settings).check(runtime.registry)
    # DRES_LOOP's framework agents, once for the process (its children inherit them): a
    # framework not installed, a module that cannot be imported, an attribute that is not an
    # agent stops the worker here, with one line naming the loop
    load_listed(settings.loops)
    log.info("tools loaded", tools=tools, loops=[str(spec) for spec in settings.loops])


def run_worker(extra: list[str], *, reaper: bool) -> int:
    settings = load_settings()
    name = pool_option(extra)
    if name in NO_SOFT_LIMIT_POOLS:
        raise ConfigError(
            f"the {name} pool never raises soft time limits, so chunks could not self-chain; "
            "dres workers use prefork or gevent"
        )
    pool = POOLS.get(name or "prefork", PREFORK)
    configure_logging_for(settings, _loglevel(extra))
    if settings.metrics_port:  # before anything imports prometheus_client or forks the pool
        WorkerMetrics.prepare(settings.metrics_port, settings.metrics_host).start()
    if pool.chunks_share_a_process:
        expect_chunks(concurrency_option(extra) or os.cpu_count() or 1)
    run_chunks_on(pool)  # before the pool forks: its children inherit it
    runtime = Runtime.from_settings(settings, pool=pool)
    app = runtime.app
    argv = ["--pool=prefork", "--without-gossip", "--without-mingle", *extra]
    if not any(a in {"-Q", "--queues"} or a.startswith("--queues=") for a in extra):
        argv.append(f"--queues={settings.foreground_queue},{settings.background_queue}")
    if not any(a in {"-l", "--loglevel"} or a.startswith("--loglevel=") for a in extra):
        argv.append("--loglevel=INFO")
    # parsed now: an option Celery's worker does not take is refused before anything connects
    start = celery_worker(app, argv, quiet=settings.log_format == "json", pool=pool.celery_pool)
    pool.hand_over()
    load_before_fork(runtime)
    # after the checks that need no Redis: a Redis that is away is waited for, one line a look
    wait_for_stores(settings)
    check_stores(settings)  # its gauge after prepare()
    check_durability(settings)

    def keep_dres_logging(**_: Any) -> None:
        # A receiver here makes Celery add no handler of its own (its task logger's would print
        # plain text beside the JSON); print() still goes to the log, as Celery would send it.
        if app.conf.worker_redirect_stdouts:
            app.log.redirect_stdouts(app.conf.worker_redirect_stdouts_level)

    signals.setup_logging.connect(keep_dres_logging, weak=False)
    run_reaper_thread(runtime, sweeps=reaper)
    return start()


def run_reaper_thread(runtime: Runtime, *, sweeps: bool) -> None:
    """From the worker's ready to its shutdown, the main process's ``ReaperThread``: it says the
    worker is alive (``GET /healthz`` counts it) and, with ``sweeps`` (no ``--no-reaper``), runs
    the reaper; as the warm shutdown begins, the worker leaves the list of the live ones."""
    threads: list[ReaperThread] = []

    def start(**_: Any) -> None:
        thread = ReaperThread(runtime.reaper(), sweeps=sweeps)
        thread.start()
        threads.append(thread)

    def depart(**_: Any) -> None:
        # in the shutdown's signal handler: only sets flags (the thread does the rest)
        for thread in threads:
            thread.depart()

    def stop(**_: Any) -> None:
        for thread in threads:
            thread.stop()

    signals.worker_ready.connect(start, weak=False)
    signals.worker_shutting_down.connect(depart, weak=False)
    signals.worker_shutdown.connect(stop, weak=False)


def celery_worker(
    app: Celery, argv: list[str], *, quiet: bool, pool: type | None = None
) -> Callable[[], int]:
    """``celery worker ARGV`` for ``app``, its options parsed now (``ConfigError`` naming one it
    does not take); calling what this returns runs the worker until it stops, and gives its exit
    code. Celery's own ``worker`` command, with the context its ``celery`` group would have made
    (``quiet``: no banner on stdout, where every line must be JSON). Not ``app.worker_main``:
    that imports the whole ``celery`` command line (its REPL, prompt_toolkit: 0.5 s of every
    worker's start) to reach this one command. ``pool``: the pool class to run instead of the
    one ``--pool`` names (dres's subclass of it)."""
    from celery.bin.base import CLIContext
    from celery.bin.worker import worker
    from click import ClickException
    from click.exceptions import Exit

    context = CLIContext(
        app=app, no_color=bool(os.environ.get("NO_COLOR")), workdir=None, quiet=quiet
    )
    try:
        parsed = worker.make_context("dres worker", argv, obj=context)
    except ClickException as e:  # an option Celery's worker does not take, or a bad value
        raise ConfigError(f"celery worker options: {e.format_message()}") from None
    except Exit as e:  # its --help, printed
        code = e.exit_code
        return lambda: code
    if pool is not None:
        parsed.params["pool"] = pool

    def run() -> int:
        with parsed:
            try:
                worker.invoke(parsed)
            except Exit as e:  # the worker's end: ``ctx.exit(exitcode)``
                return e.exit_code
        return 0

    return run
