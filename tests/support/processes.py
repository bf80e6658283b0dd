"""The dres subprocesses of the tests, the benchmarks and the chaos runner.

``WorkerProcess`` (a ``dres worker``) and its base ``DresProcess`` are ``worker.dev``'s, which
``dres demo`` uses too; ``ApiProcess`` is a ``dres api`` on a loopback port, ready when it answers
GET /healthz. Each runs in its own session and is stopped by PID (SIGTERM, then SIGKILL of its
process group).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx

from worker.dev.redis_server import free_port
from worker.dev.worker_process import READY_S, ROOT, DresProcess, WorkerProcess

TESTS = ROOT / "tests"
#: under CI a missing service or package fails a test instead of skipping it
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}

#: the dres settings of the tests (seconds): 0.5 s soft limits, a 3 s hard limit, a lease of 1 s
#: (renewed every third of it), a fast reaper; the tools of ``tests/sample_tools.py`` too
DRES_ENV = {
    "DRES_TOOLS": "worker.demo_tools,sample_tools",
    "DRES_SOFT_LIMIT_S": "0.5",
    "DRES_HARD_LIMIT_S": "3",
    "DRES_BG_SOFT_LIMIT_S": "0.5",
    "DRES_BG_HARD_LIMIT_S": "3",
    "DRES_VISIBILITY_TIMEOUT_S": "8",
    "DRES_LEASE_S": "1",
    "DRES_HANDOFF_GRACE_S": "1",
    "DRES_REAPER_INTERVAL_S": "0.2",
    "DRES_CANCEL_POLL_S": "0.05",
}

__all__ = [
    "DRES_ENV",
    "IN_CI",
    "ROOT",
    "TESTS",
    "ApiProcess",
    "DresProcess",
    "WorkerProcess",
    "run_demo",
    "stop_all",
    "subprocess_env",
]


@dataclass
class ApiProcess(DresProcess):
    """A ``dres api`` (uvicorn) subprocess; ``url`` is its base URL."""

    name: str = "api"
    url: str = ""

    @classmethod
    def start(
        cls, env: Mapping[str, str], log_path: Path, *, port: int = 0, ready: bool = True
    ) -> ApiProcess:
        """``python -m worker.edges.cli api`` on ``port`` of loopback (default: a free one)."""
        port = port or free_port()
        args = ["api", "--host", "127.0.0.1", "--port", str(port)]
        api = cls.launch(args, env, log_path, url=f"http://127.0.0.1:{port}")
        if ready:
            api.wait_ready()
        return api

    def healthy(self) -> bool:
        try:
            return httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    def wait_ready(self, timeout: float = READY_S) -> None:
        self.wait(self.healthy, timeout)


def subprocess_env(dres: Mapping[str, str], *pythonpath: Path) -> dict[str, str]:
    """The environment of a dres subprocess: this process's without any ``DRES_*``, then ``dres``;
    ``pythonpath`` goes before the PYTHONPATH inherited."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("DRES_")}
    path = os.pathsep.join(p for p in (*map(str, pythonpath), base.get("PYTHONPATH", "")) if p)
    return {**base, "PYTHONPATH": path, **dres}


def stop_all(processes: Iterable[DresProcess]) -> None:
    """SIGTERM every process at once (their warm shutdowns overlap), then stop each."""
    processes = list(processes)
    for process in processes:
        process.terminate()
    for process in processes:
        process.stop()


def run_demo(env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    """``dres demo`` as a user runs it, with ``env``; its output captured (60 s at most)."""
    return subprocess.run(
        [sys.executable, "-m", "worker.edges.cli", "demo"],
        cwd=ROOT,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=60,
    )
