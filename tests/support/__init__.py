"""The one home of what the tests, ``bench/`` and ``chaos/`` share: dres subprocesses, waiting
with a deadline, scripted-model scripts and their steps, turns crafted at the ledger level.

``from tests.support import ...`` works wherever the project root is on ``sys.path``: under
``python -m pytest`` and ``python -m bench``/``python -m chaos`` run from the root (``-m`` puts the
working directory first), ``tests`` is a namespace package. The shared fixtures are the pytest
plugin ``tests.support.fixtures``, which ``tests/conftest.py`` loads; this package does not import
it (nor pytest).

- ``processes``: ``WorkerProcess`` (``worker.dev``'s, also used by ``dres demo``), ``ApiProcess``,
  ``subprocess_env``, ``stop_all``, the tests' ``DRES_ENV``
- ``waiting``: ``poll``, ``wait_until``, ``wait_for`` (on a turn's ledger) and its predicates
- ``scripts``: ``write_script`` (the one writer of script files), ``script_writer``, the steps
- ``turns``: ``crashed_stop``, ``say``, ``close_runtime``, ``together``
- ``backends``: ``Backend``, the ledger tests' Redis backends (fakeredis, redis-server, cluster)
- ``redis_cluster``: ``LocalCluster``, a private three-master Redis Cluster (tests and the bench)
- ``redis_sentinel``: ``LocalSentinel``, a private primary, replica and three sentinels (on TLS
  only with ``tls=True``)
- ``tls``: ``make_certificates``, a throw-away CA and certificate (openssl) for TLS-only servers
- ``providers``: ``fake_provider`` (a local server speaking the Anthropic and OpenAI streaming
  formats, scripted per request), ``Reply``, ``Dialect``/``DIALECTS``, ``blackhole``
"""

from tests.support.backends import Backend
from tests.support.processes import (
    DRES_ENV,
    ROOT,
    TESTS,
    ApiProcess,
    DresProcess,
    WorkerProcess,
    stop_all,
    subprocess_env,
)
from tests.support.providers import (
    DIALECTS,
    Dialect,
    FakeProvider,
    Received,
    Reply,
    blackhole,
    fake_provider,
)
from tests.support.scripts import (
    DONE,
    EMAIL,
    MULTI_CHUNK,
    TICKET,
    Script,
    busy,
    outside_write,
    script_writer,
    send,
    slow_write,
    think,
    write_script,
)
from tests.support.turns import close_runtime, crashed_stop, say, together
from tests.support.waiting import (
    POLL_S,
    UNACKED,
    Predicate,
    broker_drained,
    ended,
    having,
    of,
    poll,
    show,
    wait_ended_through,
    wait_for,
    wait_until,
)

__all__ = [
    "DIALECTS",
    "DONE",
    "DRES_ENV",
    "EMAIL",
    "MULTI_CHUNK",
    "POLL_S",
    "ROOT",
    "TESTS",
    "TICKET",
    "UNACKED",
    "ApiProcess",
    "Backend",
    "Dialect",
    "DresProcess",
    "FakeProvider",
    "Predicate",
    "Received",
    "Reply",
    "Script",
    "WorkerProcess",
    "blackhole",
    "broker_drained",
    "busy",
    "close_runtime",
    "crashed_stop",
    "ended",
    "fake_provider",
    "having",
    "of",
    "outside_write",
    "poll",
    "say",
    "script_writer",
    "send",
    "show",
    "slow_write",
    "stop_all",
    "subprocess_env",
    "think",
    "together",
    "wait_ended_through",
    "wait_for",
    "wait_until",
    "write_script",
]
