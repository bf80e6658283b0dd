"""The HTTP wing: ``create_api`` (``app``), the routers (``turns``, ``decisions``, ``listings``,
``tenants``, the page, and the chat front ends' protocols: ``chat`` and ``agui``, their events
mapped in ``uichunks`` and ``aguievents``), who may call (``access``: no other site; ``deps``:
the tokens) and the routers' other shared dependencies, request and response bodies
(``schemas``), the OpenAPI document, live events (``sse``), the store's faults as 503/507 answers
(``faults``) and ``/metrics``.

Speaks HTTP: the lifecycle's outcomes become status codes here, nowhere below.
May import: the floors below, ``worker.edges.runtime`` and the ``redis`` wing (the API's clients).
Never the ``cli`` or ``celery`` wings.
"""
