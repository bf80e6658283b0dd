"""Which Celery pool a ``dres worker`` runs, read from its options before anything else imports.

``dres worker -P gevent`` needs gevent's monkey patches in place before anything imports
``socket``, ``ssl``, ``threading`` or ``redis`` (as ``celery -P gevent`` patches in
``celery.__main__``, before the app is imported): so this module imports only the standard
library, and the CLI wing's ``__init__`` calls ``patch_for`` first.
"""

from __future__ import annotations

from collections.abc import Sequence

#: the pool Celery's gevent option names
GEVENT = "gevent"


def pool_option(extra: Sequence[str]) -> str | None:
    """The pool ``-P``/``--pool`` names among a worker's Celery options (None: not given)."""
    for i, arg in enumerate(extra):
        if arg in {"-P", "--pool"} and i + 1 < len(extra):
            return extra[i + 1]
        if arg.startswith("--pool="):
            return arg.split("=", 1)[1]
        if arg.startswith("-P") and len(arg) > 2:  # -Pgevent, as click reads it too
            return arg[2:]
    return None


def patch_for(argv: Sequence[str]) -> bool:
    """Patch the standard library for gevent when ``argv`` (the command's arguments) is
    ``worker ... -P gevent``; whether it did."""
    if not argv or argv[0] != "worker" or pool_option(argv[1:]) != GEVENT:
        return False
    from gevent import monkey

    monkey.patch_all()
    return True


def concurrency_option(extra: Sequence[str]) -> int | None:
    """The ``-c``/``--concurrency`` among a worker's Celery options (None: not given, or not a
    number: Celery refuses that itself)."""
    for i, arg in enumerate(extra):
        value = None
        if arg in {"-c", "--concurrency"} and i + 1 < len(extra):
            value = extra[i + 1]
        elif arg.startswith("--concurrency="):
            value = arg.split("=", 1)[1]
        elif arg.startswith("-c") and len(arg) > 2:
            value = arg[2:]
        if value is not None:
            return int(value) if value.isdigit() else None
    return None
