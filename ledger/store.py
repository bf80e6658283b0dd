"""The run ledger in Redis: one stream per turn, fenced idempotent appends, paged reads, live tail.

Fencing by stream id: a run appends with explicit ids ``E-n``, E being its lease epoch and n its
own sequence. Every change of holder or status (``ledger.turns``: ``lua/claim.lua`` for a run
claiming its turn, ``lua/transition.lua`` for the rest) bumps the epoch and writes its first event
at ``E-0`` in the same atomic step, so once a successor holds epoch E+1 every XADD of the old
epoch is refused by Redis itself ("equal or smaller than the top item"): the hot path is one plain
XADD, and the fence needs no read. A refused or interrupted append is resolved by looking at the
stream: the event already at its id (a retried XADD that had landed: its very payload) is
success, a newer epoch is ``FencedOut``. A batch of a run's events goes through
``lua/append.lua``, which compares what it finds at a taken id with what it would write: our own
event there is success, anything else sends the writer on after the stream's top, never past one
of its own events.

A run's streamed text is stored compactly against its ``run_started`` (``ledger.codec``; the
lease carries it from the claim). Every read decodes through one ``Decoder`` per pass over a
turn, which looks up the ``run_started`` of an epoch it meets mid-way (one XRANGE at ``E-0``).

``Ledger`` takes an injected redis-py client (``redis.Redis`` or ``fakeredis.FakeRedis``, with or
without ``decode_responses``, or a ``redis.cluster.RedisCluster``: every command and script here
names only one turn's keys, which share the turn's hash tag and so one cluster slot).
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from importlib import resources
from typing import Any, Protocol, TypeVar

import redis
from redis.cluster import RedisCluster

from ledger import keys
from ledger.codec import FIELD, Decoder, Envelope, decode_one, encode, same_payload, text
from ledger.errors import (
    EventDecodeError,
    FencedOut,
    LedgerUnavailable,
    StopRequested,
    StoreFull,
    UnknownTurn,
)
from ledger.events import Event, ModelDone, TurnStarted
from ledger.gcpause import gc_paused
from ledger.lease import Lease
from ledger.turn import TurnMeta

log = logging.getLogger("ledger.store")

#: seven days: how long a finished turn's keys are kept
DEFAULT_FINISHED_TTL_S = 7 * 24 * 3600
#: entries per XRANGE page when reading a whole turn
DEFAULT_PAGE = 1000
#: entries per XREVRANGE page when reading a turn's last response from its end
TAIL_PAGE = 64
#: seconds an operation rides out an unreachable Redis before it gives up with
#: ``LedgerUnavailable`` (``DRES_STORE_OUTAGE_S``): a restart, a failover, a short partition
DEFAULT_OUTAGE_S = 30.0
#: seconds: the first wait after a command lost its connection, doubled after each further
#: failure up to the cap (DBOS backs off the same way, with no limit)
BACKOFF_FIRST_S = 0.05
BACKOFF_CAP_S = 1.0
#: what "Redis could not be reached" looks like to redis-py: the command may or may not have run.
#: A replica's ``READONLY`` refusal too: the server there was demoted in a failover (a Sentinel
#: client turns it into a ``ConnectionError`` itself, a plain one does not), and the write did
#: not run there, so it is sent again, to the new master once the client finds it
STORE_ERRORS = (redis.ConnectionError, redis.TimeoutError, redis.exceptions.ReadOnlyError)
#: refused appends in a row (another writer's id taken under ours) before an append gives up
_REFUSALS = 4
#: events per script call of a batch append (bounds the script's argument count)
BATCH = 256

MetaValue = str | int | float | bytes
#: the ledger's Redis: one server, or a Redis Cluster (``DRES_REDIS_CLUSTER=1``)
Client = redis.Redis | RedisCluster
T = TypeVar("T")


def _opens_response(fields: Any) -> bool:
    """Is this entry (its raw fields) a ``model_start``? Looked at without decoding it."""
    raw = fields.get(FIELD) if FIELD in fields else fields.get(FIELD.encode())
    marker = '"type":"model_start"'
    return raw is not None and (marker in raw if isinstance(raw, str) else marker.encode() in raw)


def stop_code(flag: str) -> str:
    """The stop code a turn's Stop flag holds (``cancelled``, ``superseded``); a flag of an
    older writer (``1``) is a person's Stop."""
    return "cancelled" if flag in ("", "1") else flag


def script(name: str) -> str:
    return resources.files("ledger").joinpath("lua", name).read_text()


def pairs(flat: Sequence[Any]) -> dict[Any, Any]:
    """A flat Redis reply ``[field, value, ...]`` (HGETALL, a stream entry in Lua) as a dict."""
    return dict(zip(flat[::2], flat[1::2], strict=True))


class StoreListener(Protocol):
    """Told of the store's faults (the worker's metrics): ``ledger`` imports no metrics."""

    def store_error(self, op: str) -> None:
        """A command of ``op`` (``append``, ``script``, ``read``, ...) could not reach Redis."""

    def outage_ridden(self, seconds: float) -> None:
        """An operation succeeded after riding out ``seconds`` of unreachable Redis."""


class _Outage:
    """One operation's waits while Redis is unreachable: backing off, within a window."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self.since: float | None = None
        self.delay = BACKOFF_FIRST_S

    def wait(self, started: float, error: Exception, what: str) -> None:
        """After a failed attempt that began at ``started``: sleep before the next one, or raise
        ``LedgerUnavailable`` once the window (counted from the first failed attempt) is spent."""
        self.since = started if self.since is None else self.since
        left = self.since + self.window_s - time.monotonic()
        if left <= 0:
            raise LedgerUnavailable(
                f"redis unreachable for {self.window_s:g} s ({what}): {error}"
            ) from error
        time.sleep(min(self.delay, left))
        self.delay = min(self.delay * 2, BACKOFF_CAP_S)

    def ridden(self) -> float | None:
        """Seconds ridden out, once the operation succeeded (None: no failure)."""
        return None if self.since is None else time.monotonic() - self.since


def spends_tokens(event: Event) -> bool:
    """Does appending ``event`` move the turn's usage totals (a ``model_done`` with usage)?"""
    return isinstance(event, ModelDone) and event.usage is not None


def _spending(batch: Sequence[Event]) -> list[MetaValue]:
    """``lua/append.lua``'s trailing arguments for ``batch``: how many of its events spent
    tokens, then for each its place in the batch (from 1) and its input and output tokens;
    nothing when none did."""
    spent: list[MetaValue] = []
    for k, event in enumerate(batch, 1):
        if isinstance(event, ModelDone) and event.usage is not None:
            spent += [k, event.usage.input_tokens, event.usage.output_tokens]
    return [len(spent) // 3, *spent] if spent else []


def _split(stream_id: str) -> tuple[int, int]:
    ms, _, seq = stream_id.partition("-")
    return int(ms), int(seq)


class Ledger:
    def __init__(
        self,
        client: Client,
        *,
        finished_ttl_s: int = DEFAULT_FINISHED_TTL_S,
        page: int = DEFAULT_PAGE,
        outage_s: float = DEFAULT_OUTAGE_S,
        listener: StoreListener | None = None,
    ) -> None:
        if finished_ttl_s <= 0:
            raise ValueError("finished_ttl_s must be a positive number of seconds")
        if outage_s < 0:
            raise ValueError("outage_s must be zero or a positive number of seconds")
        self.client = client
        self.finished_ttl_s = finished_ttl_s
        self.page = page
        #: seconds every operation here rides out an unreachable Redis (0: one attempt)
        self.outage_s = outage_s
        self.listener = listener
        #: monotonic time of this process's last command that could not reach Redis (None:
        #: none yet); the reaper gives live runs a full lease after it before taking any over
        self.last_error_at: float | None = None
        self._append_batch_script = client.register_script(script("append.lua"))
        self._start_script = client.register_script(script("start.lua"))

    def mend_after(self, error: BaseException) -> bool:
        """After an interrupt: drop the idle connections if ``error`` was raised inside the
        Redis client (which may have left one half set up); True if it was."""
        frames = traceback.walk_tb(error.__traceback__)
        if any(f.f_globals.get("__name__", "").startswith("redis.") for f, _ in frames):
            self.drop_idle_connections()
            return True
        return False

    def drop_idle_connections(self) -> None:
        """Close the client's idle connections: its next command connects afresh.

        An interrupt raised inside the client (a soft limit, a Stop, a shutdown: a signal
        handler's exception) can leave a connection half set up in the pool: redis-py up to 8.1.0
        cleans up after a ``RedisError`` only, and the next command that takes it fails (8.2.0
        closes it on any exception; this is then a no-op for it). A run that was interrupted
        calls this before it records its end.
        """
        if isinstance(self.client, RedisCluster):
            nodes = self.client.get_nodes()  # type: ignore[no-untyped-call]
            pools = [n.redis_connection.connection_pool for n in nodes if n.redis_connection]
        else:
            pools = [self.client.connection_pool]
        for pool in pools:
            pool.disconnect(inuse_connections=False)

    # -- appending ---------------------------------------------------------------------------

    def append(self, event: Event, *, lease: Lease, unless_stopped: bool = False) -> str:
        """Append one event under ``lease``; returns its stream id.

        Raises ``FencedOut`` when a newer run holds the turn, ``UnknownTurn`` when the turn's
        stream does not exist, ``LedgerUnavailable`` when Redis cannot be reached.
        ``unless_stopped``: only while the turn's Stop flag is unset, in the same atomic step
        (``lua/start.lua``: a write's ``tool_start``), else ``StopRequested``.
        """
        if lease.last[0] == event.event_id:
            return lease.last[1]
        if spends_tokens(event):  # the turn's usage totals move with it, in the same atomic step
            return self._batched([event], lease, unless_stopped)[0]
        stream = lease.stream
        payload = encode(event, lease.opened)
        add = self._xadd if not unless_stopped else self._start
        outage: _Outage | None = None  # made at the first failure: the hot path has none
        refusals = 0
        while refusals < _REFUSALS:
            sid = lease.next_id()
            started = time.monotonic()
            try:
                added = add(lease.turn_id, sid, payload)
            except redis.exceptions.OutOfMemoryError as e:
                raise StoreFull(f"append to turn {lease.turn_id}", [event]) from e
            except STORE_ERRORS as e:  # before ResponseError: READONLY is one
                self._failed("append", e)
                outage = outage or _Outage(self.outage_s)
                outage.wait(started, e, f"append to turn {lease.turn_id}")
                continue
            except redis.ResponseError as e:
                if "equal or smaller" not in str(e):
                    refused = self._translate(lease.turn_id, lease.epoch, e)
                    if refused is e:
                        raise
                    raise refused from e
                # Our own XADD, cut off with its connection, may have landed: the stream says.
                if self._landed(stream, sid, payload, lease):
                    lease.last = (event.event_id, sid)
                    return sid
                refusals += 1
                continue
            if outage is not None:
                self._ridden(outage)
            if added is None:
                raise UnknownTurn(lease.turn_id)
            lease.seq += 1
            lease.last = (event.event_id, sid)
            return sid
        raise LedgerUnavailable(f"turn {lease.turn_id}: append of {event.event_id} kept failing")

    def _xadd(self, turn_id: str, sid: str, payload: bytes) -> Any:
        # the command itself, without ``xadd``'s checks of options it never passes: every tool
        # call comes this way twice (redis-py leaves it unannotated)
        return self.client.execute_command(  # type: ignore[no-untyped-call]
            "XADD", keys.turn_events(turn_id), "NOMKSTREAM", sid, FIELD, payload
        )

    def _start(self, turn_id: str, sid: str, payload: bytes) -> Any:
        """``lua/start.lua`` by its hash, as one command (a write's ``tool_start`` comes this
        way: ``Script.__call__``'s own work would be a tenth of the call); loaded on a server
        that does not have it yet (a restart, a new master)."""
        turn = (keys.turn_events(turn_id), keys.turn_cancel(turn_id))
        try:
            return self.client.execute_command(  # type: ignore[no-untyped-call]
                "EVALSHA", self._start_script.sha, 2, *turn, sid, payload
            )
        except redis.exceptions.NoScriptError:
            return self._start_script(keys=turn, args=[sid, payload])

    def _landed(self, stream: str, sid: str, payload: bytes, lease: Lease) -> bool:
        """After a refused XADD: True if our event is already at ``sid`` (its very payload, as
        ``lua/append.lua`` compares: a compact text holds no event id); else fence or catch up."""
        at: Any = self.retry(partial(self.client.xrange, stream, min=sid, max=sid), "read")
        if at and same_payload(at[0][1], payload):
            lease.seq += 1
            return True
        top: Any = self.retry(partial(self.client.xrevrange, stream, count=1), "read")
        top_epoch, top_seq = _split(text(top[0][0]))
        if top_epoch > lease.epoch:
            raise FencedOut(lease.turn_id, lease.epoch, top_epoch)
        lease.seq = top_seq + 1  # our own earlier append landed unseen: go on after it
        return False

    def append_many(
        self, events: Sequence[Event], *, lease: Lease, unless_stopped: bool = False
    ) -> list[str]:
        """Append events in order under ``lease``, fenced and atomic per batch.

        A single event takes ``append``'s one-XADD path. ``unless_stopped``: only while the
        turn's Stop flag is unset, in the same atomic step (a write's ``tool_start``: once Stop
        or a new message that supersedes the turn is recorded, no write starts), else
        ``StopRequested`` and nothing written.
        """
        if len(events) == 1:  # most appends: a tool call's start, its end
            return [self.append(events[0], lease=lease, unless_stopped=unless_stopped)]
        return self._batched(events, lease, unless_stopped)

    def _batched(self, events: Sequence[Event], lease: Lease, unless_stopped: bool) -> list[str]:
        """``events`` through ``lua/append.lua``, ``BATCH`` at a time: each batch fenced and
        atomic with the turn's usage totals."""
        if not events:
            return []
        turn_keys: Sequence[str] = keys.turn_keys(lease.turn_id)
        if unless_stopped:
            turn_keys = [*turn_keys, keys.turn_cancel(lease.turn_id)]
        ids: list[str] = []
        for i in range(0, len(events), BATCH):
            ids += self._append_batch(turn_keys, lease, events[i : i + BATCH])
        return ids

    def _append_batch(
        self, turn_keys: Sequence[str], lease: Lease, batch: Sequence[Event]
    ) -> list[str]:
        payloads = [encode(event, lease.opened) for event in batch]
        spent = _spending(batch)
        while True:
            ids = [f"{lease.epoch}-{lease.seq + i}" for i in range(len(batch))]
            args: list[MetaValue] = [lease.epoch, len(batch)]
            for sid, payload in zip(ids, payloads, strict=True):
                args += [sid, payload]
            args += spent
            try:
                self.retry(partial(self._append_batch_script, keys=turn_keys, args=args), "append")
            except StoreFull as e:
                raise StoreFull(e.what, batch) from e
            except redis.ResponseError as e:
                if str(e).startswith("BEHIND"):
                    # Our sequence lags the stream (an append of ours landed unseen, or the
                    # ids are taken by other events): go on after the top, never over it. A top
                    # of another epoch is no lag of ours: another holder wrote there.
                    top_epoch, top_seq = _split(str(e).split()[1])
                    if top_epoch != lease.epoch:
                        raise FencedOut(lease.turn_id, lease.epoch, top_epoch) from e
                    lease.seq = top_seq + 1
                    continue
                raise self._translate(lease.turn_id, lease.epoch, e) from e
            lease.seq += len(batch)
            lease.last = (batch[-1].event_id, ids[-1])
            return ids

    def retry(self, call: Callable[[], T], op: str = "script") -> T:
        """``call()``, sent again while Redis is unreachable, for up to ``outage_s`` seconds.

        Every command and script here is safe to repeat (fenced; events skipped when already at
        their id; a claim by run id), so one cut off with its connection — which may or may not
        have run — may be sent again. Past the window: ``LedgerUnavailable``. A write Redis
        refuses for memory: ``StoreFull``, at once (waiting would not free any).
        """
        outage = _Outage(self.outage_s)
        while True:
            started = time.monotonic()
            try:
                result = call()
            except STORE_ERRORS as e:
                self._failed(op, e)
                outage.wait(started, e, op)
                continue
            except redis.exceptions.OutOfMemoryError as e:
                raise StoreFull(op) from e
            self._ridden(outage)
            return result

    def server_run(self) -> str:
        """The Redis server's run id (``INFO server``): a new one after every restart of the
        server and on the new master of a failover ("" where the server does not say: one
        that refuses ``INFO``, as a managed Redis may, or fakeredis). On a cluster, every
        master's, joined."""
        info: Any
        try:
            if isinstance(self.client, RedisCluster):
                info = self.retry(
                    lambda: self.client.info("server", target_nodes=RedisCluster.PRIMARIES), "read"
                )
            else:
                info = self.retry(partial(self.client.info, "server"), "read")
        except redis.ResponseError:
            return ""
        if not isinstance(info, dict):
            return ""
        if "run_id" in info:
            return str(info["run_id"])
        runs = [str(node.get("run_id", "")) for node in info.values() if isinstance(node, dict)]
        return ",".join(sorted(runs))

    def note_unreachable(self) -> None:
        """Redis could not be reached just now (by this client, or by a caller's own command)."""
        self.last_error_at = time.monotonic()

    def _failed(self, op: str, error: Exception) -> None:
        self.note_unreachable()
        if isinstance(error, redis.exceptions.ReadOnlyError):
            # a plain client's connections stay on the demoted server: connect afresh (a
            # managed Redis's name resolves to the new master)
            self.drop_idle_connections()
        if self.listener is not None:
            self.listener.store_error(op)

    def _ridden(self, outage: _Outage) -> None:
        seconds = outage.ridden()
        if seconds is not None:
            log.warning("rode out an unreachable redis", extra={"seconds": round(seconds, 3)})
            if self.listener is not None:
                self.listener.outage_ridden(seconds)

    @staticmethod
    def _translate(turn_id: str, epoch: int, error: redis.ResponseError) -> Exception:
        text = str(error)
        if text.startswith("FENCED"):
            return FencedOut(turn_id, epoch, int(text.split()[1]))
        if text.startswith("STOPPED"):
            return StopRequested(turn_id, stop_code(text.partition(" ")[2]))
        if text.startswith("NOTURN"):
            return UnknownTurn(turn_id)
        return error

    # -- reads -------------------------------------------------------------------------------

    def meta(self, turn_id: str) -> TurnMeta:
        raw = self.retry(partial(self.client.hgetall, keys.turn_meta(turn_id)), "read")
        if not raw:
            raise UnknownTurn(turn_id)
        return TurnMeta.from_hash(turn_id, raw)

    def started(self, turn_ids: Sequence[str]) -> list[TurnStarted | None]:
        """Each turn's ``turn_started`` (its entry at ``0-1``), in one round trip; None for a turn
        that is gone or whose first entry cannot be read."""

        def read() -> Any:
            pipe = self.client.pipeline(transaction=False)
            for turn_id in turn_ids:
                pipe.xrange(keys.turn_events(turn_id), min="0-1", max="0-1")
            return pipe.execute()

        found = [decode_one(entries) for entries in self.retry(read, "read")] if turn_ids else []
        return [event if isinstance(event, TurnStarted) else None for event in found]

    def last_response(self, turn_id: str) -> list[Event]:
        """The turn's events from its last ``model_start`` on (all of them when it has none):
        what its final answer is made of. Read backwards from the stream's end, each page twice
        the last up to a whole-turn read's, so a long turn's answer costs what its last response
        holds, and one with no model call what reading it forwards would."""
        stream = keys.turn_events(turn_id)
        found: list[tuple[Any, Any]] = []
        bound, count = "+", TAIL_PAGE
        while True:
            page = partial(self.client.xrevrange, stream, max=bound, min="-", count=count)
            entries: Any = self.retry(page, "read")
            found += entries
            if len(entries) < count or any(_opens_response(e[1]) for e in entries):
                break
            bound, count = f"({text(entries[-1][0])}", min(count * 2, self.page)
        events = [envelope.event for envelope in self.decode(turn_id, found[::-1])]
        starts = [i for i, event in enumerate(events) if event.type == "model_start"]
        return events[starts[-1] :] if starts else events

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
        decoder = Decoder(turn_id)
        bound, left = first, limit
        while left is None or left > 0:
            count = self.page if left is None else min(self.page, left)
            page = partial(self._page, turn_id, bound, count, decoder)
            read, last, events = self.retry(page, "read")
            yield from events
            if read < count:
                return
            bound = f"({last}"
            if left is not None:
                left -= read

    def _page(
        self, turn_id: str, bound: str, count: int, decoder: Decoder
    ) -> tuple[int, str, list[Envelope]]:
        """One XRANGE page: entries read, the last one's id, the decodable ones decoded.

        The collector is held off (``ledger.gcpause``); the reply is let go before it resumes, so
        that its first pass walks only what outlives the page.
        """
        with gc_paused():
            stream = keys.turn_events(turn_id)
            entries: Any = self.client.xrange(stream, min=bound, max="+", count=count)
            read, last = len(entries), text(entries[-1][0]) if entries else ""
            events = list(self.decode(turn_id, entries, decoder))
            del entries
        return read, last, events

    def tail(
        self, turn_id: str, after: str = "0-0", *, block_ms: int = 15_000, count: int = 100
    ) -> Iterator[list[Envelope]]:
        """Replay from ``after`` then follow live (XREAD BLOCK), with no gap and no duplicate.

        Yields one list per read: the events after the last one yielded, or an empty list when
        ``block_ms`` passed with nothing new (a moment for a keepalive). The caller stops
        iterating; the client's socket timeout must exceed ``block_ms``.
        """
        stream = keys.turn_events(turn_id)
        decoder = Decoder(turn_id)
        last = after
        while True:
            reply: Any = self.client.xread({stream: last}, count=count, block=block_ms)
            entries: list[tuple[Any, Any]] = [e for _, batch in (reply or []) for e in batch]
            if entries:
                last = text(entries[-1][0])
            yield list(self.decode(turn_id, entries, decoder))

    def last_id(self, turn_id: str) -> str | None:
        """The stream id of the turn's newest entry, or None for an empty or missing stream."""
        last = partial(self.client.xrevrange, keys.turn_events(turn_id), count=1)
        newest: Any = self.retry(last, "read")
        return text(newest[0][0]) if newest else None

    def decode(
        self, turn_id: str, entries: Iterable[tuple[Any, Any]], decoder: Decoder | None = None
    ) -> Iterator[Envelope]:
        """The decodable ``entries`` of the turn, in order; ``decoder`` carries what earlier
        reads of the same pass saw (the epochs' ``run_started``)."""
        decoder = decoder if decoder is not None else Decoder(turn_id)
        entries = list(entries)
        for epoch in decoder.missing(entries):
            sid = f"{epoch}-0"
            opening = partial(self.client.xrange, keys.turn_events(turn_id), min=sid, max=sid)
            at: Any = self.retry(opening, "read")
            if at:
                decoder.learn(at[0][0], at[0][1])
        for stream_id, fields in entries:
            try:
                yield decoder.entry(stream_id, fields)
            except EventDecodeError as e:
                # A reader never crashes on a bad entry: it is skipped and named in the log.
                log.warning(
                    "skipped malformed ledger entry",
                    extra={"turn_id": turn_id, "stream_id": text(stream_id), "error": str(e)},
                )
