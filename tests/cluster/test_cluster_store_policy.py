"""With ``DRES_REDIS_CLUSTER=1`` the start-up eviction check reads every master of the ledger's
cluster and the broker's Redis (docs/configuration.md, ``DRES_ALLOW_EVICTION``)."""

from __future__ import annotations

import pytest
import redis

from rigs.redis_cluster import LocalCluster
from worker.base.errors import ConfigError
from worker.base.settings import Settings
from worker.edges.redis.policy import check_stores


def test_every_master_and_the_broker_are_read(settings: Settings) -> None:
    readings = check_stores(settings)
    assert [(r.store, r.policy) for r in readings] == [("ledger", "noeviction")] * 3 + [
        ("broker", "noeviction")
    ]


def test_one_master_that_may_evict_is_refused_by_its_address(
    settings: Settings, redis_cluster: LocalCluster
) -> None:
    node = redis_cluster.nodes[1]
    client = redis.Redis(port=node.port)
    client.config_set("maxmemory-policy", "allkeys-lfu")
    try:
        with pytest.raises(ConfigError) as refused:
            check_stores(settings)
    finally:
        client.config_set("maxmemory-policy", "noeviction")
        client.close()
    said = str(refused.value)
    assert f"the ledger's Redis at 127.0.0.1:{node.port} has maxmemory-policy allkeys-lfu" in said
    assert said.count("has maxmemory-policy") == 1
