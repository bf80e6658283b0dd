"""A turn's events as Server-Sent Events (docs/http-api.md): replay after a stream id, then follow.

Each event goes out with its stream id as the SSE ``id``, so a client that reconnects with
``Last-Event-ID`` (or ``?after=``) gets exactly what it missed. The stream closes once the turn
has ended and nothing follows in its stream: a stopped turn that is continued goes on in the same
stream, after its earlier ``turn_ended``. It also closes, cleanly, when Redis cannot be reached:
the client reconnects with ``Last-Event-ID`` and is answered 503 until Redis is back.

A stream replays on its own with short reads, then follows its turn live through the process's
one reader (``worker.edges.http.fanout``); at most ``DRES_MAX_STREAMS`` are open at once
(``LiveStream`` holds a slot until its stream ends).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from typing import Any

import redis
import structlog
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from ledger import keys
from ledger.codec import Decoder
from worker.edges.http.fanout import (
    COUNT,
    Fanout,
    FellBehind,
    Item,
    Watch,
    decoded,
    finished,
    stream_pos,
)
from worker.edges.http.faults import RETRY_AFTER_S

log = structlog.get_logger("dres.api")

#: seconds between keepalive comments on an idle event stream
SSE_KEEPALIVE_S = 15.0
KEEPALIVE = b": keepalive\n\n"
#: seconds between looks at whether a client of a busy stream has gone
LEFT_CHECK_S = 1.0


class LiveStream(StreamingResponse):
    """An event stream holding one of the process's ``DRES_MAX_STREAMS`` slots until it ends,
    however it ends (the client gone included)."""

    def __init__(self, content: AsyncIterator[bytes], release: Callable[[], None]) -> None:
        super().__init__(
            content,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
        self._release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()
            # leave the reader now, not when the generator is collected
            aclose = getattr(self.body_iterator, "aclose", None)
            if aclose is not None:
                await aclose()


def admit_stream(request: Request) -> Fanout:
    """One of DRES_MAX_STREAMS' slots, taken before anything is read or written (released by the
    ``LiveStream``, or by the caller when it fails first); 503 with ``Retry-After`` when all are
    taken."""
    streams: Fanout = request.app.state.streams
    if not streams.admit():
        raise HTTPException(
            503,
            f"this API process serves at most {streams.max_streams} live event streams at once "
            "(DRES_MAX_STREAMS, under its open-file limit): try again shortly",
            # and its connection closed: it holds one of the process's open files meanwhile
            {"Retry-After": str(RETRY_AFTER_S), "Connection": "close"},
        )
    return streams


async def event_stream(
    streams: Fanout, request: Request, turn_id: str, start: str
) -> AsyncIterator[bytes]:
    """Replay after ``start``, then follow live; close after ``turn_ended``, or when Redis
    cannot be reached (the client resumes after the last id it got)."""
    if streams.shared:
        follow = _Follower(streams, request, turn_id, start).run()
    else:
        follow = _follow_alone(streams, request, turn_id, start)
    try:
        async for message in follow:
            yield message
    except (redis.ConnectionError, redis.TimeoutError) as e:
        log.warning("event stream closed: Redis is unreachable", turn_id=turn_id, error=str(e))


class _Follower:
    """One client's place in its turn's stream: replayed on its own, then followed through the
    reader; back on its own whenever the reader lets it go (``FellBehind``)."""

    def __init__(self, streams: Fanout, request: Request, turn_id: str, start: str) -> None:
        self.streams, self.request, self.turn_id = streams, request, turn_id
        self.last = start
        self.decoder = Decoder(turn_id)
        self.ended = False  # the last items given out held a turn_ended
        self.done = False
        self.checked = 0.0  # when the client was last seen still there (the loop's clock)

    async def run(self) -> AsyncIterator[bytes]:
        while not self.done:
            async for message in self._replay(None):
                yield message
            if self.done:
                return
            watch, since = self.streams.watch(self.turn_id, self.last)
            try:
                # what the reader handed on before this watcher joined, read on its own
                async for message in self._replay(since):
                    yield message
                if not self.done:
                    async for message in self._live(watch):
                        yield message
            finally:
                self.streams.unwatch(watch)

    async def _replay(self, until: str | None) -> AsyncIterator[bytes]:
        """Short reads after ``last``: to the end of the stream, or past ``until``."""
        stream = keys.turn_events(self.turn_id)
        while until is None or stream_pos(self.last) < stream_pos(until):
            async with self.streams.reads:
                reply: Any = await self.streams.reader.xread({stream: self.last}, count=COUNT)
            entries = [entry for _, batch in (reply or []) for entry in batch]
            items = await decoded(self.streams, self.decoder, self.turn_id, entries)
            if given := b"".join(self._give(items)):
                yield given
            if until is not None and not entries:
                return  # the stream was cut short under the reader (trimmed, removed)
            if (self.ended or not entries) and await self._finished():
                return
            if await self.request.is_disconnected():
                self.done = True
                return
            if until is None and len(entries) < COUNT:
                return  # at the end when it was read: the reader follows from here

    async def _live(self, watch: Watch) -> AsyncIterator[bytes]:
        while True:
            try:
                batches = await watch.take(SSE_KEEPALIVE_S)
            except FellBehind:
                return
            if not batches:
                if await self._finished():
                    return
                yield KEEPALIVE
            given: list[bytes] = []  # what waited goes out at once: one write, not one each
            for batch in batches:
                given += self._give(batch.items)
                self.done = self.ended and batch.finished
                if self.done:
                    break
            if given:
                yield b"".join(given)
            if self.done or await self._left(idle=not batches):
                self.done = True
                return

    def _give(self, items: Iterable[Item]) -> Iterator[bytes]:
        """The SSE messages of ``items`` after ``last``; an unreadable entry is skipped."""
        self.ended = False
        for item in items:
            if stream_pos(item.stream_id) <= stream_pos(self.last):
                continue  # read on its own before the reader handed it on
            self.last = item.stream_id
            if item.error:
                log.warning("skipped an unreadable entry", turn_id=self.turn_id, error=item.error)
                continue  # malformed entries are skipped by every reader
            self.ended = self.ended or item.type == "turn_ended"
            yield item.message

    async def _left(self, *, idle: bool) -> bool:
        """The client has gone: looked at when idle, and at most every ``LEFT_CHECK_S`` while
        events flow (a server that sees the disconnect itself cancels the stream at once)."""
        now = asyncio.get_running_loop().time()
        if not idle and now - self.checked < LEFT_CHECK_S:
            return False
        self.checked = now
        return await self.request.is_disconnected()

    async def _finished(self) -> bool:
        self.done = await finished(self.streams, self.turn_id, self.last)
        return self.done


async def _follow_alone(
    streams: Fanout, request: Request, turn_id: str, start: str
) -> AsyncIterator[bytes]:
    """One watcher's own blocking reads (a Redis Cluster: its turns' streams are on several
    nodes, which one XREAD cannot name together)."""
    stream = keys.turn_events(turn_id)
    decoder = Decoder(turn_id)
    last = start
    block: int | None = None  # the first read replays without waiting
    while True:
        reply: Any = await streams.tail.xread({stream: last}, count=COUNT, block=block)
        entries = [entry for _, batch in (reply or []) for entry in batch]
        ended = False
        for item in await decoded(streams, decoder, turn_id, entries):
            last = item.stream_id
            if item.error:
                log.warning("skipped an unreadable entry", turn_id=turn_id, error=item.error)
                continue
            yield item.message
            ended = ended or item.type == "turn_ended"
        if (ended or not entries) and await finished(streams, turn_id, last):
            return
        if not entries and block is not None:
            yield KEEPALIVE
        if await request.is_disconnected():
            return
        block = int(SSE_KEEPALIVE_S * 1000)
