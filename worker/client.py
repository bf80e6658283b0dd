"""The public Python client (CONTRACT §9): ``worker.client.enqueue_turn``."""

from worker.edges.client import enqueue, enqueue_turn

__all__ = ["enqueue", "enqueue_turn"]
