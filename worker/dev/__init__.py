"""Development tooling: the demo, an embedded redis-server, and the helper that starts and
stops ``dres worker`` processes (tests, bench and chaos use it too). The demo's tools and script,
the defaults of DRES_TOOLS and DRES_MODEL, are not here but at the package's root
(``worker/demo_tools.py``, ``worker/demo_script.json``): the floors below name them, and no
floor below names this one, not even as a string.

May import: ``ledger``, ``worker.base``, ``worker.engine``, and the edges the demo drives
(``worker.edges``). Nothing below imports ``dev`` but the edges' CLI.
"""
