"""One reader per API process for every live event stream (docs/configuration.md
``DRES_MAX_STREAMS``, docs/deploy.md): the ``Fanout``.

A single task follows every watched turn's stream with ONE ``XREAD BLOCK`` over all of them, each
from the newest id it has handed on; it decodes each entry once and hands the batch to every
watcher of that turn. A turn it does not follow yet wakes that read at once (``CLIENT UNBLOCK``
from a second connection) instead of waiting out its block. What a watcher reads on its own (its
replay of history, the check that its turn is finished, an epoch's ``run_started``) are short
reads on the API's fail-fast reader, at most ``SHORT_READS`` at a time: the process holds a
handful of Redis connections however many watch.

A watcher whose client reads slower than its turn is written (``BACKLOG`` batches waiting) is let
go: it reads on its own from its last id until it has caught up, then joins again. It never
stalls the others, and its client sees the same stream.

On a Redis Cluster the turns' streams live on different nodes, and one read cannot name them
all: there each watcher still follows its turn with a blocking read of its own (``shared`` is
false).
"""

from __future__ import annotations

import asyncio
from collections import deque
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

import redis
import redis.asyncio as aioredis
import structlog

from ledger import keys
from ledger.codec import Decoder, text
from ledger.errors import EventDecodeError

log = structlog.get_logger("dres.api")

#: milliseconds the reader's XREAD blocks when nothing is written (a new turn wakes it earlier)
BLOCK_MS = 1000
#: seconds the reader lets entries gather after a read that found some
GATHER_S = 0.005
#: entries read per stream and call
COUNT = 200
#: batches that may wait for one watcher before the reader lets it go
BACKLOG = 256
#: short reads of the event streams (replays, checks, lookups) in flight at once
SHORT_READS = 8
#: seconds between tries to wake the reader, until its XREAD is seen blocked
WAKE_RETRY_S = 0.002
#: seconds the reader may take to stop
CLOSE_S = 2.0
#: tries after which the reader's connection id is taken as stale (a reconnect changed it)
WAKE_TRIES = 25


def stream_pos(stream_id: str) -> tuple[int, int]:
    ms, _, seq = stream_id.partition("-")
    return int(ms), int(seq)


@dataclass(frozen=True, slots=True)
class Item:
    """One entry of a turn's stream, decoded once: its SSE message, or why it is skipped."""

    stream_id: str
    message: bytes = b""
    type: str = ""
    error: str = ""


@dataclass(frozen=True, slots=True)
class Batch:
    items: list[Item]
    #: the turn has ended and nothing followed the last item when it was read
    finished: bool


class FellBehind(Exception):
    """The reader let this watcher go: it reads on its own from its last id."""


class Watch:
    """One watcher's batches from the reader, at most ``BACKLOG`` waiting."""

    def __init__(self, turn_id: str) -> None:
        self.turn_id = turn_id
        self.behind = False
        self._batches: deque[Batch] = deque()
        self._ready = asyncio.Event()
        self._error: BaseException | None = None

    def push(self, batch: Batch) -> bool:
        if len(self._batches) >= BACKLOG:
            self.behind = True
        else:
            self._batches.append(batch)
        self._ready.set()
        return not self.behind

    def fail(self, error: BaseException) -> None:
        self._error = error
        self._ready.set()

    async def take(self, timeout: float) -> list[Batch]:
        """Every batch waiting, in order; none when none came within ``timeout`` seconds.
        Raises the reader's error, or ``FellBehind``, once the batches before it are taken."""
        if not self._batches and not self.behind and self._error is None:
            self._ready.clear()
            with suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._ready.wait()
        if self._batches:
            batches = list(self._batches)
            self._batches.clear()
            return batches
        if self._error is not None:
            raise self._error
        if self.behind:
            raise FellBehind(self.turn_id)
        return []


@dataclass(eq=False)
class _Turn:
    """A followed turn: its watchers, the id after which the reader reads, its decoder."""

    pos: str
    decoder: Decoder
    watchers: set[Watch] = field(default_factory=set)


class Fanout:
    """The process's live event streams: how many are open, and the reader they share."""

    def __init__(
        self, reader: aioredis.Redis, tail: aioredis.Redis, max_streams: int, *, shared: bool
    ) -> None:
        #: the fail-fast reader of the short reads
        self.reader = reader
        #: the client of blocking reads (the reader's own connection comes from its pool)
        self.tail = tail
        self.max_streams = max_streams
        self.shared = shared
        self.open = 0
        self.reads = asyncio.Semaphore(SHORT_READS)
        self._turns: dict[str, _Turn] = {}
        self._news = asyncio.Event()
        self._reading: frozenset[str] | None = None
        self._client_id: int | None = None
        self._blocking: aioredis.Redis | None = None
        self._task: asyncio.Task[None] | None = None
        self._waker: asyncio.Task[None] | None = None

    # -- DRES_MAX_STREAMS ---------------------------------------------------------------------

    def admit(self) -> bool:
        """Take a slot for one more live stream; False when all are taken."""
        if self.open >= self.max_streams:
            return False
        self.open += 1
        return True

    def release(self) -> None:
        self.open -= 1

    # -- watchers -----------------------------------------------------------------------------

    def watch(self, turn_id: str, last: str) -> tuple[Watch, str]:
        """Join the reader, at ``last``: the watch and the id after which the reader hands on
        every entry (a watcher behind it reads up to it on its own)."""
        watch = Watch(turn_id)
        turn = self._turns.get(turn_id)
        if turn is None:
            turn = self._turns[turn_id] = _Turn(last, Decoder(turn_id))
            self._news.set()
            if self._waker is None and self._reading is not None:
                self._waker = asyncio.get_running_loop().create_task(self._wake())
        turn.watchers.add(watch)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())
        return watch, turn.pos

    def unwatch(self, watch: Watch) -> None:
        turn = self._turns.get(watch.turn_id)
        if turn is None:
            return
        turn.watchers.discard(watch)
        if not turn.watchers:
            del self._turns[watch.turn_id]

    async def close(self) -> None:
        """Stop the reader (the app's shutdown); a watcher left ends as if Redis were gone."""
        if self._reading is not None and self._client_id is not None:
            # a cancelled XREAD waits for its reply (redis-py keeps the connection in step)
            with suppress(redis.RedisError):
                await self.tail.client_unblock(self._client_id)
        for task in (self._waker, self._task):
            if task is not None:
                task.cancel()
                await asyncio.wait({task}, timeout=CLOSE_S)
        self._fail_all(redis.ConnectionError("the API is shutting down"))
        if self._blocking is not None:
            await self._blocking.aclose()

    # -- the reader ---------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            if not self._turns:
                self._news.clear()
                await self._news.wait()
                continue
            try:
                await self._read_once()
            except asyncio.CancelledError:
                raise
            except redis.RedisError as e:
                log.warning("the event streams' reader lost Redis", error=str(e))
                self._fail_all(e)
            except Exception as e:  # a watcher must never wait on a dead reader
                log.exception("the event streams' reader failed")
                self._fail_all(redis.ConnectionError(f"the event streams' reader failed: {e}"))

    async def _read_once(self) -> None:
        if self._blocking is None:
            self._blocking = self.tail.client()  # one connection, so its id can be woken
        if self._client_id is None:
            self._client_id = int(await self._blocking.client_id())
        reading = dict(self._turns)
        names = {keys.turn_events(turn_id): turn_id for turn_id in reading}
        streams: dict[Any, Any] = {name: reading[t].pos for name, t in names.items()}
        self._reading = frozenset(reading)
        try:
            reply: Any = await self._blocking.xread(streams, count=COUNT, block=BLOCK_MS)
        finally:
            self._reading = None
        for stream, entries in reply or []:
            turn_id = names[text(stream)]
            turn = reading[turn_id]
            if self._turns.get(turn_id) is turn and entries:
                await self._hand_on(turn_id, turn, entries)
        if reply:
            # turns written at once (a busy API) are read in one call, not one call per entry
            await asyncio.sleep(GATHER_S)

    async def _hand_on(self, turn_id: str, turn: _Turn, entries: list[Any]) -> None:
        items = await decoded(self, turn.decoder, turn_id, entries)
        last = items[-1].stream_id
        ended = any(item.type == "turn_ended" for item in items)
        batch = Batch(items, ended and await finished(self, turn_id, last))
        turn.pos = last
        for watch in list(turn.watchers):
            if not watch.push(batch):
                log.info("a watcher fell behind: it reads on its own", turn_id=turn_id)
                turn.watchers.discard(watch)  # until it has caught up
        if not turn.watchers and self._turns.get(turn_id) is turn:
            del self._turns[turn_id]

    def _fail_all(self, error: BaseException) -> None:
        self._client_id = None  # the connection is dropped, or its next one is another
        turns, self._turns = self._turns, {}
        for turn in turns.values():
            for watch in turn.watchers:
                watch.fail(error)

    async def _wake(self) -> None:
        """Unblock the reader's XREAD, which does not name every followed turn yet."""
        tries = 0
        try:
            while self._reading is not None and not self._turns.keys() <= self._reading:
                client_id = self._client_id
                if client_id is not None:
                    if await self.tail.client_unblock(client_id):
                        return
                    tries += 1
                    if tries >= WAKE_TRIES:
                        self._client_id = None  # fetched again before the next read
                await asyncio.sleep(WAKE_RETRY_S)
        except redis.RedisError:
            pass  # the reader meets the same fault and ends its watchers
        finally:
            self._waker = None


# -- decoding and the end of a turn, for the reader and the watchers alike ----------------------


async def decoded(
    streams: Fanout, decoder: Decoder, turn_id: str, entries: list[Any]
) -> list[Item]:
    """``entries`` as SSE messages; an entry no event decodes from is an ``Item`` with an error
    (every reader skips it, docs/events.md)."""
    stream = keys.turn_events(turn_id)
    # a read from mid-turn meets text whose run_started (at E-0) came before: look it up
    for epoch in decoder.missing(entries):
        async with streams.reads:
            opening: Any = await streams.reader.xrange(stream, min=f"{epoch}-0", max=f"{epoch}-0")
        if opening:
            decoder.learn(opening[0][0], opening[0][1])
    items: list[Item] = []
    for raw_id, fields in entries:
        stream_id = text(raw_id)
        try:
            event = decoder.entry(stream_id, fields).event
        except EventDecodeError as e:
            items.append(Item(stream_id, error=str(e)))
            continue
        data = event.model_dump_json()
        message = f"id: {stream_id}\nevent: {event.type}\ndata: {data}\n\n".encode()
        items.append(Item(stream_id, message, event.type))
    return items


async def finished(streams: Fanout, turn_id: str, last: str) -> bool:
    """The turn has ended and its stream holds nothing after ``last``.

    A ``turn_ended`` alone is not the end: a stopped turn that was continued goes on in the
    same stream, and its earlier ``turn_ended`` is followed by the new run's events.
    """
    async with streams.reads:
        status = await streams.reader.hget(keys.turn_meta(turn_id), "status")
        if status is None:
            return True  # the turn expired or was removed
        if text(status) not in ("completed", "stopped"):
            return False
        newest = await streams.reader.xrevrange(keys.turn_events(turn_id), count=1)
    return not newest or stream_pos(text(newest[0][0])) <= stream_pos(last)
