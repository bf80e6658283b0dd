"""Every directory's fixtures come from one plugin, ``tests.support.fixtures``: a private real
redis-server for the session, the ledger tests' two backends, the dres settings and runtime of
this process, and ``dres worker`` subprocesses. See ``tests/support/__init__.py`` for the rest.
"""

pytest_plugins = ["tests.support.fixtures"]
