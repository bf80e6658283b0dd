"""The run ledger in Redis: one stream per turn, fenced idempotent appends, paged reads, live tail.

``Ledger`` takes an injected redis-py client (``redis.Redis`` or ``fakeredis.FakeRedis``, with or
without ``decode_responses``). Appends go through Lua scripts (``ledger/lua``) so that the lease
check, the event-id dedupe and the write are one atomic step.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

import redis

from ledger import keys
from ledger.codec import Envelope, decode_entry, encode
from ledger.errors import EventDecodeError, FencedOut, LedgerUnavailable, UnknownTurn
from ledger.events import Event, TurnStarted

log = logging.getLogger("ledger.store")

#: seven days: how long a finished turn's keys are kept
DEFAULT_FINISHED_TTL_S = 7 * 24 * 3600
#: entries per XRANGE page when reading a whole turn
DEFAULT_PAGE = 1000
#: events per script call in a batch append (bounds the script's argument count)
BATCH = 256
#: seconds to wait before each retry of an operation that lost its connection
RETRY_BACKOFF_S = (0.05, 0.2, 0.5)

MetaValue = str | int | float


def _script(name: str) -> str:
    return resources.files("ledger").joinpath("lua", name).read_text()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass(frozen=True, slots=True)
class TurnMeta:
    """The metadata hash beside a turn's stream. Unknown fields are kept in ``extra``."""

    turn_id: str
    status: str
    epoch: int
    runs: int
    chunk: int
    run_id: str
    next_run: str
    extra: Mapping[str, str]

    @classmethod
    def from_hash(cls, turn_id: str, raw: Mapping[Any, Any]) -> TurnMeta:
        fields = {_text(k): _text(v) for k, v in raw.items()}
        return cls(
            turn_id=turn_id,
            status=fields.pop("status", ""),
            epoch=int(fields.pop("epoch", 0)),
            runs=int(fields.pop("runs", 0)),
            chunk=int(fields.pop("chunk", 0)),
            run_id=fields.pop("run_id", ""),
            next_run=fields.pop("next_run", ""),
            extra=fields,
        )


@dataclass(frozen=True, slots=True)
class Claim:
    """The outcome of claiming a turn's pending run."""

    claimed: bool
    epoch: int = 0
    chunk: int = 0
    #: when not claimed: the turn's status and the run that holds it
    status: str = ""
    holder: str = ""


class Ledger:
    def __init__(
        self,
        client: redis.Redis,
        *,
        finished_ttl_s: int = DEFAULT_FINISHED_TTL_S,
        page: int = DEFAULT_PAGE,
    ) -> None:
        if finished_ttl_s <= 0:
            raise ValueError("finished_ttl_s must be a positive number of seconds")
        self.client = client
        self.finished_ttl_s = finished_ttl_s
        self.page = page
        self._append = client.register_script(_script("append.lua"))
        self._create = client.register_script(_script("create.lua"))
        self._claim = client.register_script(_script("claim.lua"))

    # -- writes ------------------------------------------------------------------------------

    def create_turn(
        self, event: TurnStarted, *, first_run: str, meta: Mapping[str, MetaValue] | None = None
    ) -> bool:
        """Create the turn with its ``turn_started`` event and ``first_run`` pending; once only.

        Returns False (and changes nothing) when the turn already exists.
        """
        fields: dict[str, MetaValue] = {
            "status": "queued",
            "next_run": first_run,
            "next_chunk": 0,
            "conversation_id": event.conversation_id,
            "mode": event.mode,
            "created": event.ts,
            **(meta or {}),
        }
        args: list[MetaValue] = [event.event_id, encode(event)]
        for name, value in fields.items():
            args += [name, value]
        created, _ = self._retry(self._create, keys.turn_keys(event.turn_id), args)
        return bool(int(created))

    def claim(self, turn_id: str, run_id: str, *, lease_until_ms: int) -> Claim:
        """Make ``run_id`` the lease holder if it is the turn's pending run (atomic)."""
        try:
            reply = self._retry(self._claim, keys.turn_keys(turn_id), [run_id, lease_until_ms])
        except redis.ResponseError as e:
            raise self._translate(turn_id, 0, e) from e
        if int(reply[0]) == 1:
            return Claim(True, epoch=int(reply[1]), chunk=int(reply[2]))
        return Claim(False, status=_text(reply[1]), holder=_text(reply[2]))

    def append(self, event: Event, *, epoch: int) -> str:
        """Append one event under lease ``epoch``; returns its stream id."""
        return self.append_many([event], epoch=epoch)[0]

    def append_many(
        self,
        events: Sequence[Event],
        *,
        epoch: int,
        meta: Mapping[str, MetaValue] | None = None,
        expire: bool = False,
    ) -> list[str]:
        """Append events of one turn in order, pipelined in batches, fenced by ``epoch``.

        ``meta`` fields are set and (with ``expire``) the turn's keys get the finished-turn expiry
        in the same atomic step as the last batch. An event id already in the ledger is not added
        again. Raises ``FencedOut`` when another run holds the turn, ``UnknownTurn`` when it has
        no metadata, ``LedgerUnavailable`` when Redis cannot be reached.
        """
        turn_ids = {e.turn_id for e in events}
        if len(turn_ids) > 1:
            raise ValueError(f"append_many takes the events of one turn, got {sorted(turn_ids)}")
        if not events:
            return []
        return self._write(events[0].turn_id, events, epoch=epoch, meta=meta, expire=expire)

    def update_meta(
        self, turn_id: str, *, epoch: int, meta: Mapping[str, MetaValue], expire: bool = False
    ) -> None:
        """Set metadata fields under lease ``epoch`` (e.g. renew the lease) without an event."""
        self._write(turn_id, [], epoch=epoch, meta=meta, expire=expire)

    def _write(
        self,
        turn_id: str,
        events: Sequence[Event],
        *,
        epoch: int,
        meta: Mapping[str, MetaValue] | None,
        expire: bool,
    ) -> list[str]:
        batches = [events[i : i + BATCH] for i in range(0, len(events), BATCH)] or [[]]
        turn_keys = keys.turn_keys(turn_id)
        calls: list[list[MetaValue]] = []
        for index, batch in enumerate(batches):
            last = index == len(batches) - 1
            ttl = self.finished_ttl_s if (last and expire) else 0
            args: list[MetaValue] = [epoch, ttl, len(batch)]
            for event in batch:
                args += [event.event_id, encode(event)]
            if last and meta:
                for name, value in meta.items():
                    args += [name, value]
            calls.append(args)
        try:
            if len(calls) == 1:
                replies = [self._retry(self._append, turn_keys, calls[0])]
            else:
                replies = self._retry_pipeline(turn_keys, calls)
        except redis.ResponseError as e:
            raise self._translate(turn_id, epoch, e) from e
        return [_text(sid) for reply in replies for sid in reply]

    def _retry_pipeline(self, turn_keys: Sequence[str], calls: list[list[MetaValue]]) -> list[Any]:
        def run() -> list[Any]:
            pipe = self.client.pipeline(transaction=False)
            for args in calls:
                self._append(keys=turn_keys, args=args, client=pipe)
            replies = list(pipe.execute(raise_on_error=False))
            for reply in replies:
                if isinstance(reply, Exception):
                    raise reply
            return replies

        replies: list[Any] = self._with_retries(run)
        return replies

    def _retry(self, script: Any, turn_keys: Sequence[str], args: Sequence[MetaValue]) -> Any:
        return self._with_retries(lambda: script(keys=turn_keys, args=args))

    @staticmethod
    def _with_retries(call: Any) -> Any:
        # Every script here is safe to repeat (fenced, deduped by event id, claim by run id), so a
        # command cut off with its connection may be sent again whether or not it ran.
        for delay in (*RETRY_BACKOFF_S, None):
            try:
                return call()
            except (redis.ConnectionError, redis.TimeoutError) as e:
                if delay is None:
                    raise LedgerUnavailable(f"redis unreachable: {e}") from e
                time.sleep(delay)
        raise AssertionError("unreachable")

    def _translate(self, turn_id: str, epoch: int, error: redis.ResponseError) -> Exception:
        text = str(error)
        if text.startswith("FENCED"):
            return FencedOut(turn_id, epoch, int(text.split()[1]))
        if text.startswith("NOTURN"):
            return UnknownTurn(turn_id)
        return error

    # -- reads -------------------------------------------------------------------------------

    def meta(self, turn_id: str) -> TurnMeta:
        raw = self.client.hgetall(keys.turn_meta(turn_id))
        if not raw:
            raise UnknownTurn(turn_id)
        return TurnMeta.from_hash(turn_id, raw)

    def read_turn(self, turn_id: str) -> list[Envelope]:
        """Every decodable event of the turn, in order (paged XRANGE)."""
        return self.read_after(turn_id, "0-0")

    def events(self, turn_id: str) -> list[Event]:
        return [envelope.event for envelope in self.read_turn(turn_id)]

    def read_after(self, turn_id: str, after: str, *, limit: int | None = None) -> list[Envelope]:
        """Events strictly after stream id ``after`` (``0-0`` for all), at most ``limit``."""
        stream = keys.turn_events(turn_id)
        out: list[Envelope] = []
        start = after
        while limit is None or len(out) < limit:
            count = self.page if limit is None else min(self.page, limit - len(out))
            entries = self.client.xrange(stream, min=f"({start}", max="+", count=count)
            if not entries:
                break
            out += self._decode(turn_id, entries)
            start = _text(entries[-1][0])
            if len(entries) < count:
                break
        return out

    def tail(
        self, turn_id: str, after: str = "0-0", *, block_ms: int = 15_000, count: int = 100
    ) -> Iterator[list[Envelope]]:
        """Replay from ``after`` then follow live (XREAD BLOCK), with no gap and no duplicate.

        Yields one list per read: the events after the last one yielded, or an empty list when
        ``block_ms`` passed with nothing new (a moment for a keepalive). The caller stops
        iterating; the client's socket timeout must exceed ``block_ms``.
        """
        stream = keys.turn_events(turn_id)
        last = after
        while True:
            reply: Any = self.client.xread({stream: last}, count=count, block=block_ms)
            entries: list[tuple[Any, Any]] = [e for _, batch in (reply or []) for e in batch]
            if entries:
                last = _text(entries[-1][0])
            yield self._decode(turn_id, entries)

    def last_id(self, turn_id: str) -> str | None:
        """The stream id of the turn's newest entry, or None for an empty or missing stream."""
        newest = self.client.xrevrange(keys.turn_events(turn_id), count=1)
        return _text(newest[0][0]) if newest else None

    @staticmethod
    def _decode(turn_id: str, entries: Iterable[tuple[Any, Any]]) -> list[Envelope]:
        out = []
        for stream_id, fields in entries:
            try:
                out.append(decode_entry(stream_id, fields))
            except EventDecodeError as e:
                # A reader never crashes on a bad entry: it is skipped and named in the log.
                log.warning(
                    "skipped malformed ledger entry",
                    extra={"turn_id": turn_id, "stream_id": _text(stream_id), "error": str(e)},
                )
        return out
