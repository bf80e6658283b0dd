"""Servers a bench row measures against, each in a process of its own (``served_apart``)."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from multiprocessing.connection import Connection


@contextmanager
def served_apart(
    serve: Callable[[Connection], None], name: str, what: str
) -> Iterator[tuple[str, Callable[[], int]]]:
    """A server a row measures against, in a process of its own (spawned: in the bench's
    process its serving would take the GIL from what is measured). ``serve(conn)`` sends its
    URL, then on each ``"count"`` the count it keeps (requests, spans), until ``"stop"``.
    Yields (its URL, that count); stopped whatever happens."""
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    child = context.Process(target=serve, args=(theirs,), name=name, daemon=True)
    child.start()

    def count() -> int:
        ours.send("count")
        counted: int = ours.recv()
        return counted

    try:
        if not ours.poll(60):
            raise RuntimeError(f"{what}'s process did not start")
        yield ours.recv(), count
    finally:
        with suppress(OSError):
            ours.send("stop")
        child.join(10)
        if child.is_alive():
            child.kill()
            child.join()
