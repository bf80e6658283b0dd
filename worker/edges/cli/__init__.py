"""The CLI wing: the ``dres`` command (``main``) and what its subcommands need: ``dres worker``'s
start-up checks (``worker``), ``dres watch`` (``watch``) and ``dres config`` (``config``).

Speaks the terminal: outcomes become exit codes (2 with one line for a bad input) here.
May import: every other wing and the floors below; ``worker.dev`` only inside a function (the
demo and ``dres up``).
"""
