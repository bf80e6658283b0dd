"""The edges: where dres meets the world, in wings named after what each faces.

- ``http/``   the HTTP API: the app, one module per group of routes, schemas, SSE, the page, the
              store's faults as answers
- ``cli/``    the ``dres`` command: its subcommands, ``dres worker``'s start-up, ``dres watch``,
              ``dres config``
- ``celery/`` the Celery app, the chunk tasks' names, the dispatcher, and the one named place of
              every Celery, kombu and billiard workaround (transport, pool, shutdown, metrics)
- ``redis/``  the Redis clients, Sentinel, and the start-up checks of eviction and durability
- ``runtime`` the composition root: builds a process's parts from the settings
- ``webhook`` the approval webhook the lifecycle is given to tell a person of a request: an
              outbound POST from whichever process ends a run waiting (a worker's chunk), so it
              sits beside ``runtime``, not in the ``http`` wing, which serves the API
- ``client``  the Python client (``worker.client``: ``enqueue_turn``, ``watch_turn``)
- ``tracing`` the OpenTelemetry SDK behind ``worker.base.tracing``'s hooks, built by ``runtime``
              when an ``OTEL_*`` endpoint is named (docs/tracing.md)

May import: ``ledger``, ``worker.base``, ``worker.engine``, ``worker.lifecycle``. Never ``tasks``:
the Celery app names the chunk tasks' module (``include=["tasks.chunks"]``) and dispatches by
task name. Only the CLI reaches ``worker.dev`` (the demo, ``dres up``), and only lazily.
Each wing's ``__init__`` says which other wings it may import (``tests/unit/test_layers.py``).
"""
