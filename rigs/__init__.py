"""The rigs that the tests, ``bench/`` and ``chaos/`` stand dres up on: its subprocesses, private
Redis set-ups, fake servers for what it talks to, waiting with a deadline, scripted-model scripts
and turns crafted at the ledger level. A testing package beside the product, not part of it: it
is not in the wheel or the image, and is imported from the repo root (``python -m pytest``,
``python -m bench``, ``python -m chaos`` run there). It imports the product (``ledger``,
``worker``) and never ``tests``, ``bench`` or ``chaos``, nor pytest: what only the suite needs
(fixtures, its backends, its settings, skip-or-fail) is ``tests/support``'s.

- ``processes``: ``WorkerProcess`` (``worker.dev``'s, also used by ``dres demo``), ``ApiProcess``,
  ``subprocess_env``, ``stop_all``, ``run_demo``
- ``waiting``: ``poll``, ``wait_until``, ``wait_for`` (on a turn's ledger) and its predicates
- ``scripts``: ``write_script`` (the one writer of script files), ``script_writer``, the steps
- ``turns``: ``crashed_stop``, ``context_of``, ``say``, ``close_runtime``, ``together``
- ``redis_cluster``: ``LocalCluster``, a private three-master Redis Cluster
- ``redis_sentinel``: ``LocalSentinel``, a private primary, replica and three sentinels (on TLS
  only with ``tls=True``)
- ``redis_durability``: ``ReplicatedRedis``, a primary and its replica; ``waitaof_binary``
- ``tls``: ``make_certificates``, a throw-away CA and certificate (openssl) for TLS-only servers
- ``providers``: ``fake_provider`` (a local server speaking the Anthropic and OpenAI streaming
  formats, scripted per request), ``Reply``, ``Dialect``/``DIALECTS``, ``blackhole``
- ``mcp_servers``, ``openapi_app``: a real MCP server and a real HTTP API described by OpenAPI,
  as subprocesses that log every call (``hangs``: making their next write hang)
- ``scrape``: reading Prometheus text as a scraper does
- ``watchers``: many SSE watchers of an API (``Watcher``, ``watch``), ``redis_connections`` (a
  process's, from ``/proc``), ``playing`` (turns whose runs the caller plays)
"""

from rigs.processes import ROOT, ApiProcess, DresProcess, WorkerProcess, stop_all, subprocess_env
from rigs.providers import (
    DIALECTS,
    Dialect,
    FakeProvider,
    Received,
    Reply,
    blackhole,
    fake_provider,
)
from rigs.scripts import (
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
from rigs.turns import close_runtime, context_of, crashed_stop, say, together
from rigs.waiting import (
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
    "EMAIL",
    "MULTI_CHUNK",
    "POLL_S",
    "ROOT",
    "TICKET",
    "UNACKED",
    "ApiProcess",
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
    "context_of",
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
