"""The CLI wing: the ``dres`` command (``main``) and what its subcommands need: ``dres worker``'s
start-up checks (``worker``), its pool read before anything else is imported (``pools``: gevent's
patches), ``dres watch`` (``watch``) and ``dres config`` (``config``).

Speaks the terminal: outcomes become exit codes (2 with one line for a bad input) here.
May import: every other wing and the floors below; ``worker.dev`` only inside a function (the
demo and ``dres up``).
"""

import sys

from worker.edges.cli.pools import patch_for

# First, before ``main`` imports redis and the worker imports Celery: ``dres worker -P gevent``
# runs on gevent's patched sockets, sleeps and locks (both ways in: ``python -m
# worker.edges.cli`` and the ``dres`` script import this package before ``main``).
patch_for(sys.argv[1:])
