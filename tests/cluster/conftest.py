"""The cluster tests' dres: the ledger on the session's three-master Redis Cluster
(``DRES_REDIS_CLUSTER=1``, ``DRES_REDIS_URL`` a node), Celery's broker on the session's plain
redis-server (``DRES_BROKER_URL``). ``settings``, ``runtime``, ``start_worker`` and ``script`` of
``tests.support.fixtures`` build on this ``dres_env`` unchanged.
"""

from __future__ import annotations

import os

import pytest

from rigs.processes import subprocess_env
from rigs.redis_cluster import LocalCluster
from tests.support import DRES_ENV, TESTS


@pytest.fixture
def dres_env(
    redis_cluster: LocalCluster, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> dict[str, str]:
    """Both Redis emptied for this test (the cluster's script caches too)."""
    redis_cluster.flushall()
    for name in list(os.environ):
        if name.startswith("DRES_"):
            monkeypatch.delenv(name)
    dres = {
        **DRES_ENV,
        "DRES_REDIS_URL": redis_cluster.url,
        "DRES_REDIS_CLUSTER": "1",
        "DRES_BROKER_URL": redis_url,
    }
    for name, value in dres.items():
        monkeypatch.setenv(name, value)
    return subprocess_env(dres, TESTS)
