"""The Redis wing: the clients of the ledger's Redis (``clients``: one server, a Cluster, or the
master Sentinels name), Sentinel discovery and its watch of failovers (``sentinel``,
``sentinel_watch``), and the start-up checks a worker and the API make of each Redis: eviction
policy (``policy``) and write durability (``durability``).

May import: ``ledger`` and ``worker.base``. No other wing, no Celery.
"""
