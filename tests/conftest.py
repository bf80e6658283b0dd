"""Every directory's fixtures come from one plugin, ``tests.support.fixtures``: a private real
redis-server for the session, the ledger tests' two backends, the dres settings and runtime of
this process, and ``dres worker`` subprocesses. The rigs they stand on (processes, private
Redis set-ups, fake servers, waiting) are the package ``rigs`` beside the product.
"""

pytest_plugins = ["tests.support.fixtures"]
