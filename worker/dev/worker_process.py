"""A ``dres worker`` subprocess: started in its own process group, ready when it says so.

Used by ``dres demo``, the chaos runner and the tests, so that every one of them starts, watches
and stops workers the same way (stopped by PID; the whole group killed when it must be).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

#: seconds a worker may take to log "ready."
READY_S = 20.0
#: seconds a worker may take to shut down warm before its process group is killed
STOP_S = 5.0
#: seconds between looks at the log while waiting for "ready."
POLL_S = 0.02
ROOT = Path(__file__).resolve().parents[1]


@dataclass
class WorkerProcess:
    process: subprocess.Popen[bytes]
    log_path: Path

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
        argv = [
            sys.executable,
            "-m",
            "worker.edges.cli",
            "worker",
            "-c",
            str(concurrency),
            "--without-heartbeat",
            *extra,
        ]
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                argv,
                cwd=ROOT,
                env=dict(env),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        worker = cls(process, log_path)
        if ready:
            worker.wait_ready()
        return worker

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout: float = READY_S) -> None:
        deadline = time.monotonic() + timeout
        while "ready." not in self.log():
            if self.process.poll() is not None:
                raise RuntimeError(f"worker exited with {self.process.returncode}:\n{self.log()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"worker not ready within {timeout} s:\n{self.log()}")
            time.sleep(POLL_S)

    def children(self) -> list[int]:
        """PIDs of the worker's pool processes (a /proc scan for its children)."""
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            # The command name may hold spaces and parentheses: the fields follow the last ")".
            if int(stat.rsplit(")", 1)[1].split()[1]) == self.pid:
                found.append(int(entry.name))
        return found

    def pool_child(self) -> int:
        children = self.children()
        if len(children) != 1:
            raise RuntimeError(f"expected one pool process, found {children}")
        return children[0]

    def kill_group(self) -> None:
        """SIGKILL the whole worker: its main process and every pool process."""
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
        _killpg(self.pid)
        self.process.wait(timeout=10)


def _killpg(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
