"""A pause of the cyclic collector (``ledger.gcpause``) ends as it began, however pauses overlap."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from ledger.gcpause import gc_paused


@pytest.fixture(autouse=True)
def collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_a_pause_turns_the_collector_off_and_back_on() -> None:
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_nested_pauses_turn_it_on_only_when_the_outer_one_ends() -> None:
    with gc_paused():
        with gc_paused():
            pass
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_pause_leaves_a_collector_the_caller_turned_off_off() -> None:
    gc.disable()
    with gc_paused():
        pass
    assert not gc.isenabled()


def test_a_pause_ends_when_its_block_raises() -> None:
    with pytest.raises(RuntimeError), gc_paused():
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_overlapping_pauses_of_two_threads_end_with_the_last_one() -> None:
    inside, release = threading.Event(), threading.Event()

    def other() -> None:
        with gc_paused():
            inside.set()
            release.wait(10)

    thread = threading.Thread(target=other)
    with gc_paused():
        thread.start()
        assert inside.wait(10)
    assert not gc.isenabled()  # the other thread's pause is still open
    release.set()
    thread.join(10)
    assert gc.isenabled()
