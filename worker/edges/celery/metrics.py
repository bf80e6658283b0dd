"""A worker's metrics on ``DRES_METRICS_PORT``: every pool process's values, served together.

Celery's prefork pool runs chunks in child processes, each with its own memory, so the metrics
use ``prometheus_client``'s multiprocess mode: each process writes its values to files in
``PROMETHEUS_MULTIPROC_DIR`` and the main process serves their sum. That mode is chosen when
``prometheus_client`` is first imported, so ``prepare`` sets the directory before anything
imports it (this module imports it only inside the functions that run after ``prepare``) and
before the pool forks:

- the directory is the user's ``PROMETHEUS_MULTIPROC_DIR``, emptied of a previous run's files,
  or else a private temporary one, removed when the worker shuts down;
- a pool process that exits is marked dead (Celery's ``worker_process_shutdown``); its counts
  stay in the sum;
- each chunk task's duration is observed from Celery's ``task_prerun``/``task_postrun``.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
from celery import signals

from worker.base import metrics
from worker.base.errors import ConfigError
from worker.edges.celery.names import CHUNK_TASK_BACKGROUND, CHUNK_TASKS

log = structlog.get_logger("dres.metrics")

#: prometheus_client's own variable: the directory of the processes' metric files
MULTIPROC_DIR = "PROMETHEUS_MULTIPROC_DIR"
#: the interface the worker's metrics port listens on unless DRES_METRICS_HOST says otherwise:
#: this machine only (the metrics name tools and queues; a scraper on another machine is the
#: operator's choice, ``0.0.0.0`` or one interface's address)
METRICS_HOST = "127.0.0.1"


@dataclass
class WorkerMetrics:
    port: int
    directory: Path
    #: the directory is ours (a temporary one) and goes when the worker shuts down
    private: bool
    #: the address the port listens on
    host: str = METRICS_HOST
    server: Any = None
    #: this process's chunk tasks in flight: task id -> perf_counter at its start
    started: dict[str, float] = field(default_factory=dict)

    @classmethod
    def prepare(cls, port: int, host: str = METRICS_HOST) -> WorkerMetrics:
        """Choose and empty the metrics directory and put it in the environment (the pool's
        processes inherit it); before ``prometheus_client`` is imported."""
        if "prometheus_client" in sys.modules:
            raise RuntimeError(
                "prometheus_client was imported before the worker set PROMETHEUS_MULTIPROC_DIR: "
                "the pool processes' metrics would not be shared"
            )
        given = os.environ.get(MULTIPROC_DIR)  # prometheus_client's variable, read by it too
        if given:
            directory = Path(given)
            directory.mkdir(parents=True, exist_ok=True)
            for stale in directory.glob("*.db"):  # a previous run's values are not this one's
                stale.unlink()
        else:
            directory = Path(tempfile.mkdtemp(prefix="dres-metrics-"))
        os.environ[MULTIPROC_DIR] = str(directory)
        return cls(port, directory, private=not given, host=host)

    def start(self) -> None:
        """Serve the sum of every process's files on the port (a thread of the main process),
        and connect the signals that keep the files; before the pool forks."""
        from prometheus_client import CollectorRegistry, start_http_server
        from prometheus_client.multiprocess import MultiProcessCollector

        metrics.get()  # the main process's own series, at zero, before any chunk runs
        registry = CollectorRegistry()
        # (prometheus_client leaves it and mark_process_dead unannotated)
        MultiProcessCollector(registry, path=str(self.directory))  # type: ignore[no-untyped-call]
        try:
            self.server, _ = start_http_server(self.port, addr=self.host, registry=registry)
        except OSError as e:
            self.stop()
            raise ConfigError(
                f"DRES_METRICS_PORT: cannot serve metrics on {self.host} port {self.port}: "
                f"{e.strerror}"
            ) from None
        signals.task_prerun.connect(self.task_started, weak=False)
        signals.task_postrun.connect(self.task_ended, weak=False)
        signals.worker_process_shutdown.connect(self.process_exiting, weak=False)
        signals.worker_shutdown.connect(self.stop, weak=False)
        log.info("serving metrics", host=self.host, port=self.port, directory=str(self.directory))

    def task_started(self, task_id: str | None = None, **_: Any) -> None:
        if task_id:
            self.started[task_id] = time.perf_counter()

    def task_ended(
        self, task_id: str | None = None, sender: Any = None, retval: Any = None, **_: Any
    ) -> None:
        began = self.started.pop(task_id or "", None)
        name = getattr(sender, "name", None)
        if began is None or name not in CHUNK_TASKS:
            return
        mode = "background" if name == CHUNK_TASK_BACKGROUND else "foreground"
        metrics.observe_chunk(mode, retval, time.perf_counter() - began)

    def process_exiting(self, pid: int | None = None, **_: Any) -> None:
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid or os.getpid(), str(self.directory))  # type: ignore[no-untyped-call]

    def stop(self, **_: Any) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
        if self.private:
            shutil.rmtree(self.directory, ignore_errors=True)
