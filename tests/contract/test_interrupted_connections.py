"""An interrupt that lands inside a Redis command never keeps the run from recording its end.

A soft limit, a Stop or a shutdown is an exception raised by a signal handler wherever the run
is, also inside redis-py while it sets up a new connection. redis-py up to 8.1.0 cleans up
after a ``RedisError`` only: the half set-up connection goes back to the pool, and the next
command that takes it fails with an ``AttributeError`` (8.2.0 closes it on any exception). Seen
in CI: a shutdown nudge landed while the run's cancellable sleep polled the Stop flag on a new
connection, and the hand-over that followed failed, so the turn waited for the reaper instead of
going to the next worker at once.

These tests interrupt the parser's set-up of the next connection (where the signal landed) on
real connections: a redis-server and a cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import Harness
from sample_tools import SimulatedSoftLimit

from ledger.store import Ledger
from rigs import DONE, think
from tests.support import Backend
from worker.base.errors import Shutdown, TurnCancelled
from worker.engine.loop import AgentLoop
from worker.engine.recorder import RunContext

Interrupt = type[BaseException]


#: fakeredis has no connections to break
pytestmark = pytest.mark.parametrize("backend", ["redis-server", "cluster"], indirect=True)


def interrupt_the_next_connect(client: Any, interrupt: Interrupt) -> Callable[[], None]:
    """Make the next new connection's parser set-up raise ``interrupt`` part way (once)."""
    parsers = {type(c._parser) for c in _connections(client)}
    assert parsers, "the client has no connection to learn its parser from"
    originals = {cls: cls.on_connect for cls in parsers}

    def on_connect(self: Any, connection: Any) -> None:
        restore()
        raise interrupt("landed inside redis-py's connection set-up")

    def restore() -> None:
        for cls, original in originals.items():
            cls.on_connect = original  # type: ignore[method-assign]

    for cls in parsers:
        cls.on_connect = on_connect  # type: ignore[method-assign]
    return restore


def _pools(client: Any) -> list[Any]:
    if hasattr(client, "get_nodes"):
        return [node.redis_connection.connection_pool for node in client.get_nodes()]
    return [client.connection_pool]


def _connections(client: Any) -> Iterator[Any]:
    for pool in _pools(client):
        yield from pool._available_connections


def new_connections_only(client: Any) -> None:
    """The next command makes a new connection (as when another thread holds the idle one)."""
    for pool in _pools(client):
        pool.reset()


def broken_then(h: Harness, interrupt: Interrupt) -> Callable[[RunContext], Any]:
    """A run that is interrupted inside the set-up of a fresh connection, mid-way."""

    def run(run: RunContext) -> Any:
        restore = interrupt_the_next_connect(h.client, interrupt)
        try:
            new_connections_only(h.client)
            h.ledger.last_id(h.turn_id)
        finally:
            restore()
        raise AssertionError("the interrupt did not land")

    return run


@pytest.mark.parametrize(
    ("interrupt", "outcome", "ended"),
    [
        (SimulatedSoftLimit, "chained", ("run_ended", "soft_limit")),
        (Shutdown, "chained", ("run_ended", "soft_limit")),
        (TurnCancelled, "stopped: cancelled", ("turn_ended", "stopped")),
    ],
)
def test_a_run_interrupted_inside_a_connection_set_up_still_records_its_end(
    backend: Backend,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    interrupt: Interrupt,
    outcome: str,
    ended: tuple[str, str],
) -> None:
    h = Harness(backend.connect(), tmp_path)
    h.start([think(1.0), DONE])
    h.ledger.last_id(h.turn_id)  # a connection to learn the parser from
    loop = h.loop()
    run = broken_then(h, interrupt)
    monkeypatch.setattr(AgentLoop, "_run", lambda self, context, recorder: run(context))

    what = h.lifecycle.run_chunk(h.turn_id, h.pending or "", loop, interrupts=(SimulatedSoftLimit,))

    assert what == outcome
    last = h.events()[-1]
    kind, value = ended
    assert last.type == kind and getattr(last, "reason", getattr(last, "status", None)) == value


def test_an_interrupt_raised_inside_the_client_mends_the_pool_it_left_broken(
    backend: Backend,
) -> None:
    """Whether or not the redis-py in use leaves the interrupted connection broken, the mend
    leaves a pool that serves, and nothing written before the interrupt is lost.

    redis-py up to 8.1.0 puts the interrupted connection back in the pool with its socket open
    and its parser half set up: the next command that takes it fails with an ``AttributeError``
    (the hazard). redis-py 8.2.0 closes it before re-raising (``Connection.connect``: ``except
    BaseException: self.disconnect()``), so the pool holds no socket of it. Either way the mend
    must close what was left open, and the client must serve again.
    """
    client = backend.connect()
    ledger = Ledger(client)
    client.set("dres-test:kept", "written before the interrupt")
    restore = interrupt_the_next_connect(client, SimulatedSoftLimit)
    new_connections_only(client)
    with pytest.raises(SimulatedSoftLimit) as inside:
        client.ping()
    restore()
    # the pools were emptied just before, so an idle connection holding a socket now is the one
    # the interrupt cut short (the hazard, redis-py <= 8.1.0); with 8.2.0 there is none
    left_open = [c for c in _connections(client) if c._sock is not None]

    assert ledger.mend_after(inside.value)

    assert all(c._sock is None for c in left_open), "the mend left a half set-up socket open"
    assert client.ping()
    assert client.get("dres-test:kept") == b"written before the interrupt"


def test_an_interrupt_raised_outside_the_client_keeps_its_connections(backend: Backend) -> None:
    client = backend.connect()
    ledger = Ledger(client)
    client.ping()
    idle = list(_connections(client))
    try:
        raise SimulatedSoftLimit("landed in the model's stream")
    except SimulatedSoftLimit as outside:
        assert not ledger.mend_after(outside)
    assert idle and all(c._sock is not None for c in _connections(client))
