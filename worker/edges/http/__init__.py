"""The HTTP wing: ``create_api`` (``app``), the routers (``turns``, ``listings``, the page), their
shared dependencies (``deps``), request and response bodies (``schemas``), the OpenAPI document,
live events (``sse``), the store's faults as 503/507 answers (``faults``) and ``/metrics``.

Speaks HTTP: the lifecycle's outcomes become status codes here, nowhere below.
May import: the floors below, ``worker.edges.runtime`` and the ``redis`` wing (the API's clients).
Never the ``cli`` or ``celery`` wings.
"""
