"""``DRES_REDIS_CLUSTER=1`` needs ``DRES_BROKER_URL`` (docs/configuration.md): Celery's broker is a
plain Redis, never the ledger's cluster, so every dres command refuses to start without one, naming
it.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from rigs import ROOT, subprocess_env
from tests.support import DRES_ENV, TESTS
from worker.base.errors import ConfigError
from worker.base.settings import load_settings


@pytest.mark.parametrize(
    "command", [["worker"], ["api", "--port", "1"], ["enqueue", "hi"]], ids=lambda c: c[0]
)
def test_a_cluster_ledger_without_a_broker_url_fails_at_start_with_one_line_naming_it(
    command: list[str],
) -> None:
    env = subprocess_env(
        {**DRES_ENV, "DRES_REDIS_CLUSTER": "1", "DRES_REDIS_URL": "redis://127.0.0.1:1/0"}, TESTS
    )
    done = subprocess.run(
        [sys.executable, "-m", "worker.edges.cli", *command],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "DRES_BROKER_URL" in lines[0], done.stderr


def test_a_cluster_ledger_with_a_broker_url_is_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DRES_BROKER_URL", raising=False)
    with pytest.raises(ConfigError, match="DRES_BROKER_URL"):
        load_settings(redis_cluster=True)
    settings = load_settings(redis_cluster=True, broker_url="redis://127.0.0.1:6379/1")
    assert settings.broker == "redis://127.0.0.1:6379/1"
