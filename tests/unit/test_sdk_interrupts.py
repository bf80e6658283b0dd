"""Interrupts are never swallowed by the provider SDKs (docs/faults.md, docs/semantics.md).

Each SDK, through its dres adapter, is blocked on the fake provider in one phase of a model call
— connecting, waiting for the first byte, mid-stream, or in the SDK's own retry sleep — and a
signal is delivered to the main thread from a helper thread once the main thread's stack shows
that phase: the soft limit (SIGUSR1), Stop (``DeferSignals.stop``: SIGUSR2), a shutdown (SIGTERM)
and Ctrl-C (SIGINT). Inside a run's window (``DeferSignals.running()``) each must come out of
``adapter.stream()`` as its own interrupt, promptly, with the SDK making no second request.

Where the trap is not armed (Celery's own soft-limit handler only), the SDK may wrap Celery's
``SoftTimeLimitExceeded`` into a connection error and retry it; the adapter must still raise the
soft limit itself, never a resumable ``ModelError``.
"""

from __future__ import annotations

import platform
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from billiard.exceptions import SoftTimeLimitExceeded
from billiard.pool import soft_timeout_sighandler

from rigs.providers import DIALECTS, Dialect, FakeProvider, Reply, blackhole, fake_provider
from tests.support import require_sdk
from worker.base.errors import Shutdown, SoftLimit, TurnCancelled
from worker.engine.models import providers
from worker.engine.models.base import ModelRequest, TextDelta, Usage, UserMessage
from worker.engine.tools.guard import DeferSignals

MAIN = threading.main_thread().ident
REQUEST = ModelRequest(system="", messages=(UserMessage("hi"),))
#: seconds the SDK would wait on its own (connect and read timeouts, a server's retry-after):
#: far beyond every deadline here, so only the interrupt can end the wait
SDK_WAIT_S = 60
#: seconds: generous bounds, only to fail rather than hang
PHASE_WITHIN_S = 15.0
PROMPTLY_S = 5.0
#: the system calls a thread waits on a socket or a sleep in (x86-64's numbers: read, poll,
#: select, recvfrom, clock_nanosleep, epoll_wait, pselect6, ppoll); not a futex (the GIL's),
#: nor a short call such as getaddrinfo's; elsewhere any system call counts
WAITS = (
    {"0", "7", "23", "45", "230", "232", "270", "271"} if platform.machine() == "x86_64" else None
)

#: a phase of a model call -> the innermost Python function while the main thread waits there:
#: the socket's connect, its read (after the server got the request, and for mid-stream after
#: the first text arrived: ``ready``), the SDK's retry sleep
PHASES = {
    "connect": ("create_connection",),
    "first_byte": ("read",),
    "mid_stream": ("read",),
    # ``_retry_request`` in the SDKs' older releases (anthropic 0.40, openai 1.55)
    "retry_sleep": ("_sleep_for_retry", "_retry_request"),
}


def waiting_in() -> str:
    """The function the main thread waits in, blocked in a system call; "" while it runs.

    A signal sent while the thread runs Python code, just before it enters a blocking call, is
    only handled once that call returns (CPython checks for signals between bytecodes): the test
    would then wait out the SDK's timeout. So the signal goes to a thread that is blocked in a
    waiting system call (``WAITS``). Only the innermost frame is read: walking a running
    thread's ``f_back`` chain from another thread can crash CPython 3.11.
    """
    native = threading.main_thread().native_id
    with open(f"/proc/self/task/{native}/syscall") as f:
        syscall = f.read().split(" ", 1)[0]
    if syscall == "running" or (WAITS is not None and syscall not in WAITS):
        return ""
    assert MAIN is not None
    frame = sys._current_frames().get(MAIN)
    return frame.f_code.co_name if frame is not None else ""


@dataclass
class Delivery:
    """A signal sent from a helper thread once the main thread waits in one of ``markers``."""

    markers: tuple[str, ...]
    send: Callable[[], None]
    #: and only once this holds too
    ready: Callable[[], bool] = lambda: True
    seen: bool = False
    sent_at: float | None = None
    thread: threading.Thread = field(init=False)

    def __post_init__(self) -> None:
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        deadline = time.monotonic() + PHASE_WITHIN_S
        while time.monotonic() < deadline:
            if self.ready() and waiting_in() in self.markers:
                self.seen = True
                break
            time.sleep(0.005)
        # Sent even when the phase was not seen: the main thread must not stay blocked.
        self.sent_at = time.monotonic()
        self.send()


@contextmanager
def delivered(
    markers: tuple[str, ...], send: Callable[[], None], ready: Callable[[], bool] = lambda: True
) -> Iterator[Delivery]:
    """Within the block, ``send`` is called once the main thread waits in one of ``markers``."""
    delivery = Delivery(markers, send, ready)
    delivery.thread.start()
    try:
        yield delivery
    finally:
        delivery.thread.join(PHASE_WITHIN_S + 1)


def kill(signum: int) -> Callable[[], None]:
    assert MAIN is not None
    return lambda: signal.pthread_kill(MAIN, signum)


@pytest.fixture(autouse=True)
def ctrl_c_raises() -> Iterator[None]:
    """Ctrl-C raises ``KeyboardInterrupt`` here, as in a process that never changed it: a test
    process (an xdist worker, after another file's processes and servers) may have inherited or
    been left another SIGINT handler, and the Ctrl-C cases would then wait out their timeout."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    with fake_provider() as server:
        yield server


def adapter(dialect: Dialect, url: str, *, max_retries: int = 2) -> providers._Adapter:
    """The dres adapter of ``dialect``'s SDK, pointed at ``url``; the SDK would wait long."""
    require_sdk(dialect.kind)
    kind = {"anthropic": providers.AnthropicModel, "openai": providers.OpenAIModel}[dialect.kind]
    base_url = f"{url}/v1" if dialect.kind == "openai" else url
    return kind(
        "m", base_url=base_url, api_key="fake-key", max_retries=max_retries, timeout=SDK_WAIT_S
    )


@contextmanager
def blocked_in(phase: str, dialect: Dialect, fake: FakeProvider) -> Iterator[str]:
    """Script the fake so a call blocks in ``phase``; yields the base URL to call."""
    if phase == "connect":
        with blackhole() as url:
            yield url
        return
    first = {
        "first_byte": Reply(hang=True),
        "mid_stream": dialect.stalled("Hel"),
        # The SDK retries a 503 on its own, after the server's retry-after.
        "retry_sleep": dialect.error(503, (("retry-after", str(SDK_WAIT_S)),)),
    }[phase]
    fake.script(first, dialect.text("never reached"))
    yield fake.url


SIGNALS: dict[str, tuple[type[BaseException], Callable[[DeferSignals], Callable[[], None]]]] = {
    "soft_limit": (SoftLimit, lambda guard: kill(signal.SIGUSR1)),
    "stop": (TurnCancelled, lambda guard: guard.stop),
    "shutdown": (Shutdown, lambda guard: kill(signal.SIGTERM)),
    "ctrl_c": (KeyboardInterrupt, lambda guard: kill(signal.SIGINT)),
}


@pytest.mark.parametrize("dialect", DIALECTS, ids=repr)
@pytest.mark.parametrize("phase", list(PHASES))
@pytest.mark.parametrize("which", list(SIGNALS))
def test_an_interrupt_landing_in_an_sdk_call_propagates_as_itself_without_a_retry(
    fake: FakeProvider, dialect: Dialect, phase: str, which: str
) -> None:
    expected, sender = SIGNALS[which]
    guard = DeferSignals()
    events: list[Any] = []

    def ready() -> bool:
        """The server holds the request; mid-stream also means after the first text arrived."""
        if phase == "connect":
            return True
        return bool(fake.received) and (phase != "mid_stream" or bool(events))

    with blocked_in(phase, dialect, fake) as url:
        model = adapter(dialect, url)
        try:
            with (
                pytest.raises(BaseException) as info,
                guard.running(),
                delivered(PHASES[phase], sender(guard), ready) as delivery,
            ):
                events.extend(model.stream(REQUEST))
            raised_at = time.monotonic()
            requests = len(fake.received)
            # The adapter and its SDK client's connection pool outlive a chunk: the process's
            # next chunk calls through the same pool, which the interrupt must have left whole.
            after = [] if phase == "connect" else list(model.stream(REQUEST))
        finally:
            model.close()

    assert delivery.seen, f"the call never waited in {PHASES[phase]}"
    assert type(info.value) is expected, repr(info.value)
    assert delivery.sent_at is not None and raised_at - delivery.sent_at < PROMPTLY_S
    assert requests == (0 if phase == "connect" else 1), "the SDK retried"
    assert events == ([TextDelta("Hel")] if phase == "mid_stream" else [])
    answered = [TextDelta("never reached"), Usage(*dialect.USAGE)]
    assert after == ([] if phase == "connect" else answered)


@pytest.mark.parametrize("dialect", DIALECTS, ids=repr)
def test_stop_requested_while_waiting_for_the_first_byte_arrives_within_a_second(
    fake: FakeProvider, dialect: Dialect
) -> None:
    """The Stop watcher's nudge ends a wait on a silent provider at once (docs/semantics.md)."""
    fake.script(Reply(hang=True))
    guard = DeferSignals()
    model = adapter(dialect, fake.url)
    try:
        with (
            pytest.raises(TurnCancelled),
            guard.running(),
            delivered(PHASES["first_byte"], guard.stop, lambda: bool(fake.received)) as delivery,
        ):
            list(model.stream(REQUEST))
        elapsed = time.monotonic() - (delivery.sent_at or 0)
    finally:
        model.close()
    assert delivery.seen
    assert elapsed < 1.0, f"{elapsed:.2f} s from the nudge to TurnCancelled"


# -- Celery's own handler, no dres trap ----------------------------------------------------------


@contextmanager
def celery_soft_limit() -> Iterator[None]:
    """SIGUSR1 handled as in a Celery pool child without dres: ``SoftTimeLimitExceeded``."""
    previous = signal.signal(signal.SIGUSR1, soft_timeout_sighandler)
    try:
        yield
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_without_the_trap_the_soft_limit_is_still_found_in_what_the_anthropic_sdk_raises(
    fake: FakeProvider,
) -> None:
    """The hazard the trap exists for, checked without pinning it: anthropic up to 2.17.0 (the
    locked one) catches Celery's ``SoftTimeLimitExceeded`` (an ``Exception``) in its send and
    raises ``APIConnectionError`` from it. Whether the SDK wraps it or one day lets it through,
    the adapter's ``wrapped_interrupt`` must find the soft limit in what comes out."""
    require_sdk("anthropic")
    import anthropic

    fake.script(Reply(hang=True))
    client = anthropic.Anthropic(
        base_url=fake.url, api_key="fake-key", max_retries=0, timeout=SDK_WAIT_S
    )
    messages: Any = [{"role": "user", "content": "hi"}]
    try:
        with (
            celery_soft_limit(),
            pytest.raises((anthropic.APIConnectionError, SoftTimeLimitExceeded)) as info,
            # once the fake has the request: under load the client may wait for its first
            # byte before the fake's thread has recorded it (seen in CI, 0 requests received)
            delivered(PHASES["first_byte"], kill(signal.SIGUSR1), lambda: bool(fake.received)),
        ):
            client.messages.create(model="m", max_tokens=8, messages=messages, stream=True)
    finally:
        client.close()
    assert isinstance(providers.wrapped_interrupt(info.value), SoftTimeLimitExceeded)
    assert len(fake.received) == 1


def test_without_the_trap_the_anthropic_sdk_may_retry_past_celerys_soft_limit(
    fake: FakeProvider,
) -> None:
    """Issue 13's first finding, as a tripwire rather than a pin: anthropic up to 2.17.0 (the
    locked one) swallows the soft limit and retries, and the call is answered anyway — which is
    why the adapter arms its own trap. Should a release stop swallowing it, the soft limit comes
    out at once and no second request is made; either way nothing else may happen."""
    require_sdk("anthropic")
    import anthropic

    dialect = next(d for d in DIALECTS if d.kind == "anthropic")
    fake.script(Reply(hang=True), dialect.text("answered anyway"))
    client = anthropic.Anthropic(
        base_url=fake.url, api_key="fake-key", max_retries=1, timeout=SDK_WAIT_S
    )
    messages: Any = [{"role": "user", "content": "hi"}]
    kinds: list[str] = []
    try:
        with (
            celery_soft_limit(),
            delivered(PHASES["first_byte"], kill(signal.SIGUSR1), lambda: bool(fake.received)),
        ):
            try:
                stream = client.messages.create(
                    model="m", max_tokens=8, messages=messages, stream=True
                )
                with stream:
                    kinds = [event.type for event in stream]
            except SoftTimeLimitExceeded:
                kinds = ["soft_limit"]  # an SDK that lets the interrupt through
    finally:
        client.close()
    if kinds == ["soft_limit"]:
        assert len(fake.received) == 1
    else:
        assert "message_stop" in kinds  # the hazard: swallowed, retried, answered
        assert len(fake.received) == 2


@pytest.mark.parametrize("dialect", DIALECTS, ids=repr)
@pytest.mark.parametrize("phase", ["connect", "first_byte", "mid_stream"])
def test_without_the_trap_the_adapter_raises_celerys_soft_limit_never_a_model_error(
    fake: FakeProvider, dialect: Dialect, phase: str
) -> None:
    events: list[Any] = []

    def ready() -> bool:
        return phase != "mid_stream" or bool(events)

    with blocked_in(phase, dialect, fake) as url:
        model = adapter(dialect, url, max_retries=0)
        try:
            with (
                celery_soft_limit(),
                pytest.raises(SoftTimeLimitExceeded),
                delivered(PHASES[phase], kill(signal.SIGUSR1), ready) as delivery,
            ):
                events.extend(model.stream(REQUEST))
        finally:
            model.close()
    assert delivery.seen


# -- the classification itself -------------------------------------------------------------------


def chained(inner: BaseException, *, cause: bool) -> Exception:
    """A ``RuntimeError`` raised while handling ``inner``, with it as its cause or context."""
    try:
        try:
            raise inner
        except BaseException as e:
            if cause:
                raise RuntimeError("wrapped") from e
            # the implicit context is the point: an error raised while an interrupt unwinds
            raise RuntimeError("failed while cleaning up")  # noqa: B904
    except RuntimeError as outer:
        return outer
    raise AssertionError("unreachable")


@pytest.mark.parametrize(
    "inner",
    [SoftTimeLimitExceeded(), SoftLimit("x"), TurnCancelled("x"), KeyboardInterrupt()],
    ids=type,
)
@pytest.mark.parametrize("cause", [True, False], ids=["cause", "context"])
def test_model_error_raises_an_interrupt_found_in_the_chain_instead_of_classifying_it(
    inner: BaseException, cause: bool
) -> None:
    require_sdk("anthropic")
    import anthropic

    outer = chained(inner, cause=cause)
    with pytest.raises(type(inner)) as info:
        providers.model_error(anthropic, outer)
    assert info.value is inner


def test_model_error_walks_past_plain_errors_in_the_chain() -> None:
    """Only interrupts are raised: an ordinary error in the chain leaves the classification."""
    require_sdk("anthropic")
    import anthropic

    outer = chained(ConnectionResetError("peer reset"), cause=True)
    assert providers.model_error(anthropic, outer) is None
