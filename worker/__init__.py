"""The dres worker, in floors; each floor's ``__init__`` says what lives there and what it may
import (``tests/unit/test_layers.py`` checks every rule):

- ``base/``      settings, clock and ids, errors, logging, failpoints: the ground floor
- ``engine/``    the agent loop, the recorder, history, tools (registry, executor), models
- ``lifecycle/`` one service for claim, hand-over, takeover, Stop, Continue; heartbeat; reaper
- ``edges/``     the HTTP API, the CLI, the client, watch, the Celery app and runtime wiring
- ``dev/``       the demo, its tools and scripts, embedded Redis, worker process helpers

``worker.tools`` and ``worker.client`` are the public names of docs/tools.md and
docs/architecture.md.
"""
