"""``dres demo`` (docs/commands.md): the whole story on a real prefork worker, and its exit
status."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from rigs.processes import run_demo
from worker.dev.redis_server import RedisServer

ROOT = Path(__file__).resolve().parents[2]


def demo_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DRES_")}
    return {**env, **extra}


def test_the_demo_resumes_after_its_soft_limit_and_sends_one_email(
    redis_server: RedisServer,
) -> None:
    done = run_demo(demo_env())
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "run_ended     soft_limit" in out
    assert "cause=next_chunk" in out
    assert "send_email NOT RUN (completed)" in out
    assert "Completed - these side effects already happened" in out
    assert "Outbox: 1 email(s) sent by this turn" in out
    assert "Turn status: completed" in out


def test_without_redis_server_the_demo_runs_on_fakeredis_and_says_so(tmp_path: Path) -> None:
    """PATH without redis-server: the demo falls back to fakeredis's TCP server, with a warning."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    env = demo_env(PATH=f"{bin_dir}:{Path(sys.executable).parent}")
    if any((Path(p) / "redis-server").exists() for p in env["PATH"].split(":")):
        pytest.skip("redis-server sits beside the Python interpreter")
    done = run_demo(env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "WARNING: no redis-server found" in done.stdout
    assert "Outbox: 1 email(s) sent by this turn" in done.stdout
