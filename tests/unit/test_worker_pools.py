"""``dres worker``'s pool, read from its Celery options before anything is imported (gevent's
patches must come first): every spelling Celery's ``-P`` takes, and nothing else patched."""

from __future__ import annotations

import pytest

from worker.edges.cli.pools import patch_for, pool_option


@pytest.mark.parametrize(
    ("extra", "pool"),
    [
        (["-P", "gevent"], "gevent"),
        (["--pool", "gevent"], "gevent"),
        (["--pool=gevent"], "gevent"),
        (["-Pgevent"], "gevent"),
        (["-c", "50", "-l", "info", "-P", "solo"], "solo"),
        (["-c", "2"], None),
        (["-P"], None),
    ],
)
def test_the_pool_option_in_each_spelling(extra: list[str], pool: str | None) -> None:
    assert pool_option(extra) == pool


@pytest.mark.parametrize(
    "argv",
    [[], ["worker"], ["worker", "-P", "prefork"], ["enqueue", "-P", "gevent"], ["api"]],
)
def test_only_a_gevent_worker_is_patched(argv: list[str]) -> None:
    assert patch_for(argv) is False
