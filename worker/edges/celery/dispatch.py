"""The lifecycle's ``Dispatcher`` over Celery: chunk messages sent by task name, prepared to go
out inside the hand-over's own step when the broker is the ledger's Redis, revoked on Stop, and
the queues looked into for the reaper."""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Any
from uuid import uuid4

import kombu.exceptions
import redis
import structlog
from celery import Celery

from ledger import keys
from ledger.turns import Outgoing
from worker.base.settings import Settings
from worker.edges.celery import marks
from worker.edges.celery import transport as broker
from worker.edges.celery.marks import MarkingChannel
from worker.edges.celery.names import chunk_task
from worker.lifecycle.dispatch import run_ids, task_id

log = structlog.get_logger("dres.dispatch")


def like(template: Outgoing, turn_id: str, run_id: str) -> Outgoing:
    """A chunk message of the same task, queue and options as ``template`` (one Celery made),
    for ``run_id`` of ``turn_id``: its task id (and the headers and properties that echo it), its
    arguments, its mark and a delivery tag of its own."""
    message = json.loads(template.message)
    tid = task_id(turn_id, run_id)
    args = [turn_id, run_id]
    message["headers"] = {**message["headers"], "id": tid, "root_id": tid, "argsrepr": repr(args)}
    properties = message["properties"]
    message["properties"] = {**properties, "correlation_id": tid, "delivery_tag": str(uuid4())}
    if properties.get("body_encoding") != "base64":
        raise ValueError(f"a chunk message's body encoding {properties.get('body_encoding')!r}")
    body = json.loads(base64.b64decode(message["body"]))
    body[0] = args
    message["body"] = base64.b64encode(json.dumps(body).encode()).decode()
    return Outgoing(
        template.queue,
        json.dumps(message),
        keys.chunk_message(turn_id, run_id),
        template.mark_ttl_s,
    )


class CeleryDispatcher:
    """Sends chunk messages by task name; the worker that runs a chunk sets its time limits."""

    def __init__(self, app: Celery, settings: Settings) -> None:
        self.app = app
        self.settings = settings
        #: the app's Queue objects: publishing to a declared one skips re-declaring it
        self.queues = {queue.name: queue for queue in app.conf.task_queues}
        #: the broker is the ledger's own server (DRES_BROKER_URL unset or the same URL, no
        #: cluster), through dres's transport, which keeps a message on request (``prepare``)
        self.shares_store = (
            settings.broker_url in ("", settings.redis_url)
            and not settings.redis_cluster
            and app.conf.broker_transport in (broker.TRANSPORT, broker.SENTINEL_TRANSPORT)
        )
        self._queue_keys: tuple[str, ...] | None = None

    def dispatch(self, turn_id: str, run_id: str, mode: str) -> None:
        self.app.send_task(
            chunk_task(mode),
            args=[turn_id, run_id],
            task_id=task_id(turn_id, run_id),
            queue=self.queues[self.settings.queue(mode)],
        )

    def prepare(self, turn_id: str, run_id: str, mode: str) -> Outgoing | None:
        """``Dispatcher.prepare``: Celery makes the message as it would send it (headers, queue,
        priority list), and dres's transport keeps it instead of writing it."""
        if not self.shares_store:
            return None
        with marks.held() as kept:
            try:
                self.dispatch(turn_id, run_id, mode)
            except kombu.exceptions.OperationalError as e:
                # the broker out of reach before anything was kept: the step goes alone, and
                # ``dispatch`` after it meets the outage as it always did
                log.warning("could not make the message to send with the step", error=str(e))
                return None
        if len(kept) == 1 and kept[0] is not None:
            return kept[0]
        if not kept:  # sent after all, by a transport that keeps nothing: sent again after the
            # step (a second message of one run is claimed once)
            log.warning("a transport sent a message it was asked to keep", run_id=run_id)
        return None

    def prepare_all(self, runs: Sequence[tuple[str, str, str]]) -> list[Outgoing | None]:
        """``Dispatcher.prepare_all``: Celery makes the first run's message of each mode as it
        would send it (``prepare``); the others of that mode are that message with their own
        ids (``like``): what tells two chunk messages of one mode apart is the task id and its
        echoes, the arguments and the delivery tag. Making a message costs Celery ~0.15 ms;
        10,000 timers falling due at once are ~0.03 ms each this way. The tripwire
        (tests/unit/test_dispatch_messages.py) holds each to Celery's own."""
        made: dict[str, Outgoing | None] = {}
        out: list[Outgoing | None] = []
        for turn_id, run_id, mode in runs:
            if mode not in made:
                made[mode] = self.prepare(turn_id, run_id, mode)
                out.append(made[mode])
                continue
            template = made[mode]
            out.append(None if template is None else like(template, turn_id, run_id))
        return out

    def revoke(self, turn_id: str, run_id: str) -> None:
        """Best effort (``Dispatcher``): the claim of a revoked run is refused anyway, so a broker
        out of reach costs a worker one look at a stale message, not a Stop its answer."""
        try:
            self.app.control.revoke(task_id(turn_id, run_id))
        except kombu.exceptions.OperationalError as e:
            log.warning("could not revoke a stopped run's message", run_id=run_id, error=str(e))

    def marked(self, turn_id: str, run_id: str) -> bool:
        """Is the run's message in the broker, by its mark (``worker.edges.celery.marks``)? One
        ``EXISTS`` on a pooled broker connection; False also when the transport keeps no marks."""
        with self.app.pool.acquire(block=True) as connection:
            channel: Any = connection.default_channel
            if not isinstance(channel, MarkingChannel) or not channel.marks_messages():
                return False
            return bool(channel.client.exists(keys.chunk_message(turn_id, run_id)))

    def queued_runs(self) -> set[str] | None:
        """Run ids in the chunk queues or held unacknowledged (kombu's Redis transport): every
        message read, O(backlog) bytes. The reaper asks for a due run without a mark, or with
        one old enough to doubt while the queues are short (``Reaper``)."""
        replies = self._read_queues(lambda pipe, key: pipe.lrange(key, 0, -1), unacked=True)
        return None if replies is None else run_ids(m for reply in replies for m in reply)

    def backlog(self) -> int | None:
        """Messages waiting in the chunk queues (every priority list): one ``LLEN`` each."""
        replies = self._read_queues(lambda pipe, key: pipe.llen(key), unacked=False)
        return None if replies is None else sum(int(n) for n in replies)

    def queue_keys(self) -> tuple[str, ...] | None:
        """The chunk queues' lists (every priority) when the broker is the ledger's own server
        (``shares_store``), named as kombu's transport names them; read once per process."""
        if not self.shares_store:
            return None
        if self._queue_keys is None:
            with self.app.pool.acquire(block=True) as connection:
                channel: Any = connection.default_channel
                names = [self.settings.foreground_queue, self.settings.background_queue]
                self._queue_keys = tuple(
                    channel._q_for_pri(name, pri)
                    for name in names
                    for pri in channel.priority_steps
                )
        return self._queue_keys

    def _read_queues(self, read: Any, *, unacked: bool) -> list[Any] | None:
        """``read(pipe, key)`` for each chunk queue's priority list (and the unacknowledged
        messages' values when ``unacked``), in one round trip on a pooled broker connection
        (tenant admission asks at every turn's start and end); None: not kombu's Redis
        transport, whose queues cannot be looked into here. A broker out of reach (or hung past
        the publish timeout) raises kombu's ``OperationalError``, as a publish does."""
        try:
            with self.app.pool.acquire(block=True) as connection:
                # as many attempts to connect as a publish makes (the API's few, a worker's
                # Celery default): kombu's own default retries a hung broker for seconds
                policy = self.app.conf.task_publish_retry_policy or {}
                connection.ensure_connection(
                    max_retries=policy.get("max_retries", 3),
                    interval_start=policy.get("interval_start", 0),
                    interval_step=policy.get("interval_step", 0.2),
                    interval_max=policy.get("interval_max", 0.2),
                )
                channel: Any = connection.default_channel
                client = getattr(channel, "client", None)
                if client is None or not hasattr(channel, "unacked_key"):
                    return None
                names = [self.settings.foreground_queue, self.settings.background_queue]
                pipe = client.pipeline(transaction=False)
                for name in names:
                    for pri in channel.priority_steps:
                        read(pipe, channel._q_for_pri(name, pri))
                if unacked:
                    pipe.hvals(channel.unacked_key)
                return list(pipe.execute())
        except (redis.RedisError, OSError) as e:
            raise kombu.exceptions.OperationalError(f"the broker: {e}") from e
