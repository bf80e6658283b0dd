"""The edges: where dres meets the world — the HTTP API, the CLI, the client, ``dres watch``, the
Celery app and the runtime that wires a process together.

May import: ``ledger``, ``worker.base``, ``worker.engine``, ``worker.lifecycle``, ``worker.dev``
(the CLI runs the demo and the embedded Redis). Never ``tasks``: the Celery app names the chunk
tasks' module (``include=["tasks.chunks"]``) and dispatches by task name.
"""
