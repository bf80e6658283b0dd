"""The engine: one run of one chunk — the agent loop, the recorder of its events, the history a
model is shown, the tools (registry, executor with both resume layers) and the models.

May import: ``ledger``, ``worker.base``. Never the lifecycle, the edges, ``dev`` or Celery:
time limits reach the loop as the exception types it is told to let through. Inside it, the
models know nothing of the executor (``engine.models`` never imports ``engine.tools``).
"""
