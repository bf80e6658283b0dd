"""A turn's events as Server-Sent Events (docs/http-api.md): replay after a stream id, then follow.

Each event goes out with its stream id as the SSE ``id``, so a client that reconnects with
``Last-Event-ID`` (or ``?after=``) gets exactly what it missed. The stream closes once the turn
has ended and nothing follows in its stream: a stopped turn that is continued goes on in the same
stream, after its earlier ``turn_ended``. It also closes, cleanly, when Redis cannot be reached:
the client reconnects with ``Last-Event-ID`` and is answered 503 until Redis is back.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import redis
import redis.asyncio as aioredis
import structlog
from starlette.requests import Request

from ledger import keys
from ledger.codec import Decoder, text
from ledger.errors import EventDecodeError

log = structlog.get_logger("dres.api")

#: seconds between keepalive comments on an idle event stream
SSE_KEEPALIVE_S = 15.0
STREAM_ID = re.compile(r"^\d+-\d+$")


async def _finished(reader: aioredis.Redis, turn_id: str, last: str) -> bool:
    """The turn has ended and its stream holds nothing after ``last``.

    A ``turn_ended`` alone is not the end: a stopped turn that was continued goes on in the
    same stream, and its earlier ``turn_ended`` is followed by the new run's events.
    """
    status = await reader.hget(keys.turn_meta(turn_id), "status")
    if status is None:
        return True  # the turn expired or was removed
    if text(status) not in ("completed", "stopped"):
        return False
    newest = await reader.xrevrange(keys.turn_events(turn_id), count=1)
    return not newest or _stream_pos(text(newest[0][0])) <= _stream_pos(last)


def _stream_pos(stream_id: str) -> tuple[int, int]:
    ms, _, seq = stream_id.partition("-")
    return int(ms), int(seq)


async def event_stream(
    reader: aioredis.Redis, request: Request, turn_id: str, start: str
) -> AsyncIterator[bytes]:
    """Replay after ``start``, then follow live; close after ``turn_ended``, or when Redis
    cannot be reached (the client resumes after the last id it got)."""
    try:
        async for message in _follow(reader, request, turn_id, start):
            yield message
    except (redis.ConnectionError, redis.TimeoutError) as e:
        log.warning("event stream closed: Redis is unreachable", turn_id=turn_id, error=str(e))


async def _follow(
    reader: aioredis.Redis, request: Request, turn_id: str, start: str
) -> AsyncIterator[bytes]:
    stream = keys.turn_events(turn_id)
    decoder = Decoder(turn_id)
    last = start
    block: int | None = None  # the first read replays without waiting
    while True:
        reply: Any = await reader.xread({stream: last}, count=200, block=block)
        entries = [entry for _, batch in (reply or []) for entry in batch]
        # a replay from mid-turn meets text whose run_started (at E-0) came before: look it up
        for epoch in decoder.missing(entries):
            opening: Any = await reader.xrange(stream, min=f"{epoch}-0", max=f"{epoch}-0")
            if opening:
                decoder.learn(opening[0][0], opening[0][1])
        ended = False
        for stream_id, fields in entries:
            last = text(stream_id)
            try:
                envelope = decoder.entry(stream_id, fields)
            except EventDecodeError as e:
                log.warning("skipped an unreadable entry", turn_id=turn_id, error=str(e))
                continue  # malformed entries are skipped by every reader
            data = envelope.event.model_dump_json()
            yield f"id: {last}\nevent: {envelope.event.type}\ndata: {data}\n\n".encode()
            ended = ended or envelope.event.type == "turn_ended"
        if (ended or not entries) and await _finished(reader, turn_id, last):
            return
        if not entries and block is not None:
            yield b": keepalive\n\n"
        if await request.is_disconnected():
            return
        block = int(SSE_KEEPALIVE_S * 1000)
