"""Development tooling: the demo and its tools and scripts, an embedded redis-server, and the
helper that starts and stops ``dres worker`` processes (tests, bench and chaos use it too).

May import: ``ledger``, ``worker.base``, ``worker.engine`` (the demo's tools), and the edges the
demo drives (``worker.edges``). Nothing below imports ``dev`` but the edges' CLI.
"""
