"""The Celery wing: the app (``app``), the chunk tasks' names (``names``), the lifecycle's
dispatcher over Celery (``dispatch``), the messages' marks in the broker (``marks``), and the one
named place of every Celery, kombu and billiard workaround, each with its upstream issue and a
tripwire test that fails if the workaround goes while the bug stays:

- ``transport``: kombu's Redis transport restores unacknowledged messages through a connection
  Celery already collected after a broker restart (``'NoneType' object has no attribute
  'hostname'``, celery/kombu#970, celery/celery#10205, #10302) -- tripwire
  ``tests/integration/test_broker_transport_kombu.py``; a Sentinel connection that moves to the
  next Sentinel's URL drops dres's transport -- ``tests/unit/test_broker_transport.py``; and
  kombu restores a dead worker's unacknowledged messages only from prefork's event loop, never
  under the gevent pool (celery/celery#4976) -- ``tests/integration/test_gevent_restore.py``.
- ``app``: kombu's restore mutex, left held by a worker killed inside a restore, blocks every
  restore for 300 s (kombu's ``unacked_mutex_expire``); dres's expires after 10 s --
  ``tests/integration/test_gevent_restore.py``.
- ``pool``: the prefork pool re-registers a dead child's ``None`` sentinel (celery/kombu#2623) and a
  dead child's recycled result pipe (celery/celery#4185) after a consumer restart --
  ``tests/integration/test_worker_pool.py``.
- ``shutdown``: a SIGTERM hands each running chunk over (Celery's warm shutdown waits for tasks),
  and a late soft limit is dropped instead of raised into a child's pool loop --
  ``tests/integration/test_graceful_shutdown.py``.
- ``greenlets``: Celery's gevent pool has no soft limit, and its ``terminate_job`` kills a task's
  greenlet anywhere, between a tool's effect and its record too: a run's interrupts thrown into
  its greenlet at a safe point, and a pool that hands a terminated run ``Shutdown`` --
  ``tests/integration/test_gevent_pool.py``.
- ``marks``: an acknowledgement that cannot reach Redis still frees its prefetch slot (under
  the gevent pool's loop a held slot stopped the worker taking messages for good) --
  ``tests/integration/test_store_faults.py`` (its gevent case).
- ``wakeup``: a consumer polling without an event loop (the gevent pool's ``synloop``) asks for
  a message only at a poll's start and only with a free prefetch slot, so a slot an
  acknowledgement frees waited out the 2 s poll: a chunk boundary's ~1.7 s (celery/celery#7718);
  the acknowledgement wakes the poll -- ``tests/integration/test_gevent_boundary.py``.
- ``metrics``: prometheus_client's multiprocess mode set before the pool forks.

May import: ``ledger``, ``worker.base``, ``worker.engine`` (the guard's signals),
``worker.lifecycle`` (the dispatcher's protocol) and the ``redis`` wing (Sentinel options).
Never the ``http`` or ``cli`` wings.
"""
