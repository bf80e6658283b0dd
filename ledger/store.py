"""The run ledger in Redis: one stream per turn, fenced idempotent appends, paged reads, live tail.

Fencing by stream id: a run appends with explicit ids ``E-n``, E being its lease epoch and n its
own sequence. Every change of holder (``lua/claim.lua`` for a run claiming its turn,
``lua/seize.lua`` for the rest) bumps the epoch and writes its first event at ``E-0`` in the
same atomic step, so once a successor holds epoch E+1 every XADD of the old epoch is refused by
Redis itself ("equal or smaller than the top item"): the hot path is one plain XADD, and the
fence needs no read. A refused or interrupted append is resolved by looking
at the stream: the event already at its id (a retried XADD that had landed) is success, a newer
epoch is ``FencedOut``. Writes that must change metadata too go through ``lua/append.lua``.

``Ledger`` takes an injected redis-py client (``redis.Redis`` or ``fakeredis.FakeRedis``, with or
without ``decode_responses``).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import partial
from importlib import resources
from typing import Any, TypeVar

import redis

from ledger import keys
from ledger.codec import FIELD, Envelope, decode_entry, encode, text
from ledger.errors import EventDecodeError, FencedOut, LedgerUnavailable, UnknownTurn
from ledger.events import Event, RunStarted, TurnStarted
from ledger.lease import Claim, Lease, TurnMeta

log = logging.getLogger("ledger.store")

#: seven days: how long a finished turn's keys are kept
DEFAULT_FINISHED_TTL_S = 7 * 24 * 3600
#: entries per XRANGE page when reading a whole turn
DEFAULT_PAGE = 1000
#: seconds to wait before each retry of an operation that lost its connection
RETRY_BACKOFF_S = (0.05, 0.2, 0.5)
#: the waits before each attempt of a write after the first; None: the last attempt
_ATTEMPTS = (*RETRY_BACKOFF_S, None)
#: events per script call in a metadata-changing batch (bounds the script's argument count)
BATCH = 256

MetaValue = str | int | float | bytes
T = TypeVar("T")


def _script(name: str) -> str:
    return resources.files("ledger").joinpath("lua", name).read_text()


def _pairs(flat: Sequence[Any]) -> dict[Any, Any]:
    """A flat Redis reply ``[field, value, ...]`` (HGETALL, a stream entry in Lua) as a dict."""
    return dict(zip(flat[::2], flat[1::2], strict=True))


def _split(stream_id: str) -> tuple[int, int]:
    ms, _, seq = stream_id.partition("-")
    return int(ms), int(seq)


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
        self._append_meta = client.register_script(_script("append.lua"))
        self._create = client.register_script(_script("create.lua"))
        self._seize = client.register_script(_script("seize.lua"))
        self._claim = client.register_script(_script("claim.lua"))

    # -- creating and claiming ---------------------------------------------------------------

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
            "next_cause": "first",
            "conversation_id": event.conversation_id,
            "mode": event.mode,
            "created": event.ts,
            **(meta or {}),
        }
        args: list[MetaValue] = [encode(event)]
        for name, value in fields.items():
            args += [name, value]
        created = self._retry(lambda: self._create(keys=keys.turn_keys(event.turn_id), args=args))
        return bool(int(created))

    def claim(
        self,
        turn_id: str,
        run_id: str,
        *,
        lease_until_ms: int,
        event_id: str,
        ts: float,
        background_lease_until_ms: int | None = None,
        read_from: str = "",
    ) -> Claim:
        """Make ``run_id`` the lease holder if it is the turn's pending run (one atomic step).

        The claim records ``run_started`` (with ``event_id`` and ``ts``; its chunk, cause and
        epoch from the metadata) at the new epoch's first stream id. A run that is not the
        pending one (a duplicate delivery, a run already claimed, a stale message) gets no lease.
        The lease runs to ``lease_until_ms``, or to ``background_lease_until_ms`` for a background
        turn. ``read_from``: a stream id (``-`` for the start) to read the turn from in the same
        step, up to a page of entries (``Claim.entries``; ``Claim.read_all``: that was the end).
        ``Claim.meta`` is the metadata as it was just before, with the Stop flag.
        """
        head = self._started_head(turn_id, run_id, event_id, ts)
        background = (
            lease_until_ms if background_lease_until_ms is None else background_lease_until_ms
        )
        count = self.page if read_from else 0
        args: list[MetaValue] = [run_id, head, lease_until_ms, background, read_from, count]
        turn_keys = (*keys.turn_keys(turn_id), keys.turn_cancel(turn_id))
        try:
            reply: Any = self._retry(lambda: self._claim(keys=turn_keys, args=args))
        except redis.ResponseError as e:
            raise self._translate(turn_id, 0, e) from e
        meta = TurnMeta.from_hash(turn_id, _pairs(reply[1]), stop_requested=bool(reply[2]))
        if int(reply[0]) == 1:
            chunk = int(meta.extra.get("next_chunk", meta.chunk))
            cause = meta.extra.get("next_cause", "first")
            lease = Lease(turn_id, run_id, int(reply[3]), chunk, cause, seq=1)
            if len(reply) < 5:
                return Claim(lease, meta)
            raw = [(sid, _pairs(flat)) for sid, flat in reply[4]]
            entries = list(self._decode(turn_id, raw))
            return Claim(
                lease, meta, entries=entries, read_from=read_from, read_all=len(raw) < count
            )
        if meta.run_id == run_id and meta.status == "running":
            # A retried claim whose first reply was lost: the claim is ours. A duplicate delivery
            # of the same run that lost the race looks alike, but the epoch opens with the
            # winner's run_started, not ours.
            started = self._opening(turn_id, meta.epoch)
            if started is not None and started.event_id == event_id:
                lease = Lease(turn_id, run_id, meta.epoch, started.chunk, started.cause, seq=1)
                return Claim(lease, meta)
        return Claim(None, meta, status=meta.status, holder=meta.run_id)

    @staticmethod
    def _started_head(turn_id: str, run_id: str, event_id: str, ts: float) -> str:
        """``run_started``'s JSON without chunk, cause and epoch (``claim.lua`` adds them)."""
        data = RunStarted(event_id=event_id, turn_id=turn_id, run_id=run_id, chunk=0, ts=ts)
        known = data.model_dump(mode="json", exclude={"chunk", "cause", "epoch"})
        return json.dumps(known, separators=(",", ":"), ensure_ascii=False)[:-1]

    def _opening(self, turn_id: str, epoch: int) -> RunStarted | None:
        """The ``run_started`` that opened epoch ``epoch`` (stream id ``E-0``), if any."""
        sid = f"{epoch}-0"
        at: Any = self.client.xrange(keys.turn_events(turn_id), min=sid, max=sid)
        if not at:
            return None
        try:
            event = decode_entry(at[0][0], at[0][1]).event
        except EventDecodeError:
            return None
        return event if isinstance(event, RunStarted) else None

    def seize(
        self,
        meta: TurnMeta,
        *,
        expect: Mapping[str, MetaValue],
        events: Sequence[Event] = (),
        set_meta: Mapping[str, MetaValue] | None = None,
        run_id: str = "",
        expire: bool | None = None,
    ) -> Lease | None:
        """Take the turn under epoch ``meta.epoch + 1`` if it is as ``meta`` and ``expect`` say.

        ``meta`` is the metadata the caller decided on; the epoch must still be the one read,
        and each ``expect`` field must hold its value (``""`` for unset). The ``events`` are
        written first under the new epoch and ``set_meta`` is applied, atomically. ``expire``:
        True gives the turn's keys the finished-turn expiry, False removes an expiry (a stopped
        turn continued), None leaves it. Returns the new lease (held by ``run_id``), or None when
        the turn changed in between.
        """
        conditions: dict[str, MetaValue] = {"epoch": meta.epoch, **expect}
        ttl = 0 if expire is None else (self.finished_ttl_s if expire else -1)
        args: list[MetaValue] = [ttl, len(conditions)]
        for name, value in conditions.items():
            args += [name, value]
        args.append(len(events))
        args += [encode(event) for event in events]
        for name, value in (set_meta or {}).items():
            args += [name, value]
        turn_keys = keys.turn_keys(meta.turn_id)
        try:
            reply = self._retry(lambda: self._seize(keys=turn_keys, args=args))
        except redis.ResponseError as e:
            raise self._translate(meta.turn_id, 0, e) from e
        if int(reply[0]) != 1:
            return None
        epoch = int(reply[1])
        chunk = int((set_meta or {}).get("chunk", meta.chunk))
        cause = meta.extra.get("next_cause", "first")
        return Lease(meta.turn_id, run_id, epoch, chunk, cause, seq=len(events))

    # -- appending ---------------------------------------------------------------------------

    def append(self, event: Event, *, lease: Lease) -> str:
        """Append one event under ``lease``; returns its stream id.

        Raises ``FencedOut`` when a newer run holds the turn, ``UnknownTurn`` when the turn's
        stream does not exist, ``LedgerUnavailable`` when Redis cannot be reached.
        """
        if lease.last[0] == event.event_id:
            return lease.last[1]
        stream = keys.turn_events(lease.turn_id)
        fields: dict[Any, Any] = {FIELD: encode(event)}
        for delay in _ATTEMPTS:
            sid = lease.next_id()
            try:
                added = self.client.xadd(stream, fields, id=sid, nomkstream=True)
            except redis.ResponseError as e:
                if "equal or smaller" not in str(e):
                    raise
                if self._landed(stream, sid, event.event_id, lease):
                    lease.last = (event.event_id, sid)
                    return sid
                continue
            except (redis.ConnectionError, redis.TimeoutError) as e:
                if delay is None:
                    raise LedgerUnavailable(f"redis unreachable: {e}") from e
                time.sleep(delay)
                continue
            if added is None:
                raise UnknownTurn(lease.turn_id)
            lease.seq += 1
            lease.last = (event.event_id, sid)
            return sid
        raise LedgerUnavailable(f"turn {lease.turn_id}: append of {event.event_id} kept failing")

    def _landed(self, stream: str, sid: str, event_id: str, lease: Lease) -> bool:
        """After a refused XADD: True if our event is already at ``sid``; else fence or catch up."""
        at: Any = self.client.xrange(stream, min=sid, max=sid)
        if at and decode_entry(at[0][0], at[0][1]).event.event_id == event_id:
            lease.seq += 1
            return True
        top: Any = self.client.xrevrange(stream, count=1)
        top_epoch, top_seq = _split(text(top[0][0]))
        if top_epoch > lease.epoch:
            raise FencedOut(lease.turn_id, lease.epoch, top_epoch)
        lease.seq = top_seq + 1  # our own earlier append landed unseen: go on after it
        return False

    def append_many(
        self,
        events: Sequence[Event],
        *,
        lease: Lease,
        meta: Mapping[str, MetaValue] | None = None,
        expire: bool = False,
    ) -> list[str]:
        """Append events in order and set ``meta`` fields, fenced and atomic per batch.

        With ``expire`` the turn's keys get the finished-turn expiry in the same step. A single
        event with nothing else to change takes ``append``'s one-XADD path.
        """
        if not events and not meta:
            return []
        if len(events) == 1 and not meta and not expire:
            return [self.append(events[0], lease=lease)]  # the one-XADD fast path
        turn_keys = keys.turn_keys(lease.turn_id)
        batches = [events[i : i + BATCH] for i in range(0, len(events), BATCH)] or [[]]
        ids: list[str] = []
        for index, batch in enumerate(batches):
            last = index == len(batches) - 1
            ids += self._append_batch(
                turn_keys, lease, batch, meta if last else None, expire and last
            )
        return ids

    def _append_batch(
        self,
        turn_keys: Sequence[str],
        lease: Lease,
        batch: Sequence[Event],
        meta: Mapping[str, MetaValue] | None,
        expire: bool,
    ) -> list[str]:
        payloads = [encode(event) for event in batch]
        while True:
            ids = [f"{lease.epoch}-{lease.seq + i}" for i in range(len(batch))]
            args: list[MetaValue] = [lease.epoch, self.finished_ttl_s if expire else 0, len(batch)]
            for sid, payload in zip(ids, payloads, strict=True):
                args += [sid, payload]
            for name, value in (meta or {}).items():
                args += [name, value]
            try:
                self._retry(partial(self._append_meta, keys=turn_keys, args=args))
            except redis.ResponseError as e:
                if str(e).startswith("BEHIND"):
                    lease.seq = _split(str(e).split()[1])[1] + 1
                    continue
                raise self._translate(lease.turn_id, lease.epoch, e) from e
            lease.seq += len(batch)
            return ids

    def update_meta(
        self, *, lease: Lease, meta: Mapping[str, MetaValue], expire: bool = False
    ) -> None:
        """Set metadata fields under ``lease`` (e.g. renew it) without an event."""
        self.append_many([], lease=lease, meta=meta, expire=expire)

    @staticmethod
    def _retry(call: Callable[[], T]) -> T:
        # Every script here is safe to repeat (fenced; events skipped when already at their id;
        # a claim by run id), so a command cut off with its connection may be sent again.
        for delay in _ATTEMPTS:
            try:
                return call()
            except (redis.ConnectionError, redis.TimeoutError) as e:
                if delay is None:
                    raise LedgerUnavailable(f"redis unreachable: {e}") from e
                time.sleep(delay)
        raise AssertionError("unreachable")

    @staticmethod
    def _translate(turn_id: str, epoch: int, error: redis.ResponseError) -> Exception:
        text = str(error)
        if text.startswith("FENCED"):
            return FencedOut(turn_id, epoch, int(text.split()[1]))
        if text.startswith("NOTURN"):
            return UnknownTurn(turn_id)
        return error

    # -- reads -------------------------------------------------------------------------------

    def meta(self, turn_id: str) -> TurnMeta:
        raw = self._retry(partial(self.client.hgetall, keys.turn_meta(turn_id)))
        if not raw:
            raise UnknownTurn(turn_id)
        return TurnMeta.from_hash(turn_id, raw)

    def read_turn(self, turn_id: str) -> list[Envelope]:
        """Every decodable event of the turn with its stream id, in order (paged XRANGE)."""
        return self.read_after(turn_id, "0-0")

    def events(self, turn_id: str) -> list[Event]:
        """Every decodable event of the turn, in order (paged XRANGE)."""
        return [envelope.event for envelope in self._pages(turn_id, "-", None)]

    def read_after(self, turn_id: str, after: str, *, limit: int | None = None) -> list[Envelope]:
        """Events strictly after stream id ``after`` (``0-0`` for all), at most ``limit``."""
        return list(self._pages(turn_id, f"({after}", limit))

    def read_from(self, turn_id: str, start: str) -> list[Envelope]:
        """Events from stream id ``start`` on, that entry included when it is still there."""
        return list(self._pages(turn_id, start, None))

    def _pages(self, turn_id: str, first: str, limit: int | None) -> Iterator[Envelope]:
        """Decoded entries from the XRANGE bound ``first`` (``(id`` exclusive, ``id`` inclusive)."""
        stream = keys.turn_events(turn_id)
        bound, left = first, limit
        while left is None or left > 0:
            count = self.page if left is None else min(self.page, left)
            page = partial(self.client.xrange, stream, min=bound, max="+", count=count)
            entries: Any = self._retry(page)
            yield from self._decode(turn_id, entries)
            if len(entries) < count:
                return
            bound = f"({text(entries[-1][0])}"
            if left is not None:
                left -= len(entries)

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
                last = text(entries[-1][0])
            yield list(self._decode(turn_id, entries))

    def last_id(self, turn_id: str) -> str | None:
        """The stream id of the turn's newest entry, or None for an empty or missing stream."""
        newest: Any = self._retry(
            partial(self.client.xrevrange, keys.turn_events(turn_id), count=1)
        )
        return text(newest[0][0]) if newest else None

    @staticmethod
    def _decode(turn_id: str, entries: Iterable[tuple[Any, Any]]) -> Iterator[Envelope]:
        for stream_id, fields in entries:
            try:
                yield decode_entry(stream_id, fields)
            except EventDecodeError as e:
                # A reader never crashes on a bad entry: it is skipped and named in the log.
                log.warning(
                    "skipped malformed ledger entry",
                    extra={"turn_id": turn_id, "stream_id": text(stream_id), "error": str(e)},
                )
