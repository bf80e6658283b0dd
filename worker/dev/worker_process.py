"""``dres`` subprocesses: started in their own session, ready when they say so, stopped by PID.

``DresProcess`` is any ``python -m worker.edges.cli ARGS`` process with its output in a log file;
``WorkerProcess`` is a ``dres worker``. Used by ``dres demo``, and through ``rigs`` by the
tests, the benchmarks and the chaos runner, so that every one of them starts, watches and stops
processes the same way (stopped by PID; the whole group killed when it must be).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

#: seconds a process may take to be ready (a worker: to log "ready.")
READY_S = 20.0
#: seconds a process may take to shut down warm before its process group is killed
STOP_S = 5.0
#: seconds between looks at a process (its log, an HTTP probe) while waiting for it to be ready
POLL_S = 0.02
#: the project root, where every dres subprocess runs (``python -m`` puts it on sys.path)
ROOT = Path(__file__).resolve().parents[2]


#: fields of ``/proc/PID/stat`` after the command name: its state, its parent, its process group
PPID, PGRP = 1, 2


def processes_whose(field: int, value: int) -> list[int]:
    """PIDs of the processes whose ``/proc/PID/stat`` field (``PPID``, ``PGRP``) is ``value``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        # The command name may hold spaces and parentheses: the fields follow the last ")".
        if int(stat.rsplit(")", 1)[1].split()[field]) == value:
            found.append(int(entry.name))
    return found


@dataclass
class DresProcess:
    """A ``dres`` subprocess in its own session (its PID is its group's), its output in a log."""

    process: subprocess.Popen[bytes]
    log_path: Path
    #: what it is, in messages: "worker", "api", ...
    name: str = "dres"

    @classmethod
    def launch(
        cls, args: Sequence[str], env: Mapping[str, str], log_path: Path, **fields: Any
    ) -> Self:
        """``python -m worker.edges.cli ARGS`` from the project root with exactly ``env``."""
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "worker.edges.cli", *args],
                cwd=ROOT,
                env=dict(env),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return cls(process, log_path, **fields)

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait(self, ready: Callable[[], bool], timeout: float = READY_S) -> None:
        """Poll ``ready()`` until it holds; fail if the process exits, or after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while not ready():
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with {self.process.returncode}:\n{self.log()}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} not ready within {timeout} s:\n{self.log()}")
            time.sleep(POLL_S)

    def group(self) -> list[int]:
        """PIDs of every process of its process group (itself and all it started)."""
        return processes_whose(PGRP, self.pid)

    def pss_bytes(self) -> int:
        """The memory its process group holds: the sum of each process's proportional set size
        (``Pss`` in ``/proc/PID/smaps_rollup``: shared pages counted once over their sharers)."""
        total_kib = 0
        for pid in self.group():
            with contextlib.suppress(OSError):  # gone meanwhile
                for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                    if line.startswith("Pss:"):
                        total_kib += int(line.split()[1])
        return total_kib * 1024

    def kill_group(self) -> None:
        """SIGKILL the whole process group: the main process and every child it started."""
        _killpg(self.pid)
        self.process.wait(timeout=10)

    def terminate(self) -> None:
        """SIGTERM: a warm shutdown."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def stop(self) -> None:
        """SIGTERM (a warm shutdown), wait, then SIGKILL whatever is left of the group."""
        if self.process.poll() is None:
            self.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=STOP_S)
        # Whatever is left of its session (a pool process outliving its parent) goes too.
        _killpg(self.pid)
        self.process.wait(timeout=10)


@dataclass
class WorkerProcess(DresProcess):
    """A ``dres worker`` (prefork) subprocess."""

    name: str = "worker"

    @classmethod
    def start(
        cls,
        env: Mapping[str, str],
        log_path: Path,
        *,
        concurrency: int = 1,
        extra: Sequence[str] = (),
        ready: bool = True,
    ) -> WorkerProcess:
        """``python -m worker.edges.cli worker -c N`` with ``env``, its output in ``log_path``."""
        args = ["worker", "-c", str(concurrency), "--without-heartbeat", *extra]
        worker = cls.launch(args, env, log_path)
        if ready:
            worker.wait_ready()
        return worker

    def wait_ready(self, timeout: float = READY_S) -> None:
        self.wait(lambda: "ready." in self.log(), timeout)

    def children(self) -> list[int]:
        """PIDs of the worker's pool processes (a /proc scan for its children)."""
        return processes_whose(PPID, self.pid)

    def running_chunks(self) -> int:
        """PID of the process that runs its chunks: its one pool process (prefork), or itself
        when it forked none (gevent: every chunk a greenlet of the worker's own process)."""
        return self.pool_child() if self.children() else self.pid

    def pool_child(self) -> int:
        children = self.children()
        if len(children) != 1:
            raise RuntimeError(f"expected one pool process, found {children}")
        return children[0]


def _killpg(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
