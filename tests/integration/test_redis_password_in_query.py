"""A Redis password in ``DRES_REDIS_URL``'s query (``?password=``, as redis-py reads it) on a real
redis-server with ``requirepass``: a real worker (prefork, gevent) and this process's runtime
(the ledger through redis-py, the broker through kombu) run a turn to its end, and the worker's
log never shows the password (docs/configuration.md "A Redis password", docs/security.md).

kombu reads only a URL's userinfo and failed on the query's (``TypeError: dict() got multiple
values for keyword argument 'password'``): the settings move it into the userinfo."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from rigs import DONE, WorkerProcess, of, show, wait_for
from rigs.waiting import ended
from tests.support.fixtures import BOTH_POOLS, started
from worker.dev.redis_server import RedisServer
from worker.edges.runtime import Runtime

pytestmark = pytest.mark.redis_server

PASSWORD = "query-SEKRET-pw"


@pytest.fixture(scope="module")
def locked_redis() -> Iterator[RedisServer]:
    """A redis-server of this module's that answers only with its password."""
    yield from started(
        lambda: RedisServer(
            extra=("--requirepass", PASSWORD), client_options={"password": PASSWORD}
        ).start(),
        "a real redis-server",
    )


@pytest.fixture
def store_env(locked_redis: RedisServer) -> dict[str, str]:
    return {"DRES_REDIS_URL": f"redis://127.0.0.1:{locked_redis.port}/0?password={PASSWORD}"}


@BOTH_POOLS
def test_a_turn_runs_on_a_redis_whose_password_is_in_the_url_s_query(
    runtime: Runtime, start_worker: Callable[..., WorkerProcess], script: Callable[..., str]
) -> None:
    worker = start_worker()
    turn = runtime.lifecycle.enqueue("Say done", model=script([DONE]))

    events = wait_for(runtime.ledger, turn.turn_id, ended(), timeout=60, what="the turn's end")

    assert of(events, "turn_ended")[-1].status == "completed", show(events)
    assert PASSWORD not in worker.log(), worker.log()[-4000:]
