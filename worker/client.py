"""The public Python client (docs/architecture.md): ``worker.client.enqueue_turn`` and
``worker.client.watch_turn``."""

from worker.edges.client import enqueue_turn, watch_turn

__all__ = ["enqueue_turn", "watch_turn"]
