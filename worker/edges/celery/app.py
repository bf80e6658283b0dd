"""The Celery app: the only ``Celery(...)`` in dres, built from the one settings object.

Durable chunk settings (see shared/research/celery-redis-facts.md):
- JSON only; results ignored (the ledger is the record);
- prefork pool (the only pool that raises soft time limits; ``worker.edges.celery.pool``'s, which
  survives a consumer restart that finds a pool child gone), ``acks_late`` with
  ``reject_on_worker_lost`` (a killed pool child's message is delivered again at once) and
  prefetch 1 (a worker reserves only what it runs);
- acks on failure and timeout: a chunk killed by its hard limit is not requeued forever; the
  reaper resumes the turn when the run's lease runs out;
- one visibility timeout, set everywhere Celery reads it and above every hard limit, so a
  running chunk is never delivered to a second worker; unacked messages of a dead worker are
  restored every ``unacked_restore_interval`` seconds instead of every ~100;
- kombu's Redis transport with one fix (``worker.edges.celery.transport``): a consumer whose broker
  restarted while it held unacknowledged messages reconnects instead of stopping the worker;
  through Sentinel (``DRES_REDIS_SENTINELS``, ``sentinel://`` URLs) kombu's Sentinel transport
  with the same fix, the master's name and the Sentinels' options (password, TLS) in its
  transport options, and with a ``rediss://`` DRES_REDIS_URL the master's TLS options as
  ``broker_use_ssl`` (kombu's ``SentinelChannel`` then opens ``SentinelManagedSSLConnection``s);
  broker connections that keep that transport when they move to the next Sentinel's URL
  (``broker.AMQP``);
- two queues, foreground and background, and a chunk task name per mode whose time limits come
  from the settings of the worker that runs it (task annotations), never from the message: the
  process that sent a chunk (the API, another worker) does not decide how long it may run.
"""

from __future__ import annotations

from typing import Any

import structlog
from celery import Celery, signals
from kombu.entity import Queue

from worker.base.settings import Settings
from worker.edges.celery import pool as prefork
from worker.edges.celery import transport as broker
from worker.edges.celery.names import CHUNK_TASK, CHUNK_TASK_BACKGROUND, CHUNK_TASKS
from worker.edges.redis.clients import chunks_expected, pool_size
from worker.edges.redis.sentinel import SENTINEL_TIMEOUT_S, sentinel_options

#: seconds between sweeps that restore a dead worker's unacknowledged messages
UNACKED_RESTORE_INTERVAL_S = 5
#: seconds kombu's restore mutex outlives a worker that died holding it (kombu's default: 300):
#: a gevent worker restores while its greenlets run, so a SIGKILL lands inside a restore often
#: enough to stall every restore for 5 minutes (``make chaos POOL=gevent``); two restores at once
#: are safe, each message moves in a transaction that watches the unacked hash. Tripwire:
#: ``tests/integration/test_gevent_restore.py`` (a mutex left held delays the restore briefly)
UNACKED_MUTEX_EXPIRE_S = 2 * UNACKED_RESTORE_INTERVAL_S


#: how often a process that fails fast (the API) sends a chunk message again after a failed
#: attempt, at once: a connection a broker restart left in the pool is replaced, an outage is not
#: waited out (Celery's default is 3 retries, up to a second apart)
FAIL_FAST_PUBLISH_RETRIES = 1


#: what every dres app sets alike (the module's docstring says why each): JSON only, results
#: ignored, acks late and on failure, a killed child's message delivered again, prefetch 1
DURABLE_CHUNKS: dict[str, Any] = {
    "task_serializer": "json",
    "result_serializer": "json",
    "event_serializer": "json",
    "accept_content": ["json"],
    "task_ignore_result": True,
    "task_acks_late": True,
    "task_reject_on_worker_lost": True,
    "task_acks_on_failure_or_timeout": True,
    "worker_prefetch_multiplier": 1,
    "worker_pool": prefork.POOL,  # prefork, with a Celery/kombu mismatch's workaround
    "worker_hijack_root_logger": False,
    "worker_cancel_long_running_tasks_on_connection_loss": True,
    "broker_connection_retry_on_startup": True,
}


def create_app(settings: Settings, *, publish_timeout_s: float | None = None) -> Celery:
    """The app. ``publish_timeout_s`` (the API's): each broker command, connecting included,
    may take that long, and a publish is retried once at once, so an unreachable or hung broker
    fails a send within a few of them; None (a worker's): no socket timeout, Celery's retries."""
    vt = settings.visibility_timeout
    transport: dict[str, Any] = {
        "visibility_timeout": vt,
        "unacked_restore_interval": UNACKED_RESTORE_INTERVAL_S,
        "unacked_restore_throttle": 1,
        "unacked_mutex_expire": UNACKED_MUTEX_EXPIRE_S,
        # kombu's channel opens at most 10 Redis connections and refuses an 11th at once
        # (MaxConnectionsError): a gevent worker's chunks ack together, all of them after a
        # broker restart, and a refused ack ("Couldn't ack") leaves the message to be delivered
        # again after the visibility timeout (``make chaos POOL=gevent``); sized as the ledger's
        "max_connections": pool_size(chunks_expected()),
    }
    fail_fast: dict[str, Any] = {}
    if publish_timeout_s is not None:
        transport |= {
            "socket_timeout": publish_timeout_s,
            "socket_connect_timeout": publish_timeout_s,
        }
        fail_fast["task_publish_retry_policy"] = {
            "max_retries": FAIL_FAST_PUBLISH_RETRIES,
            "interval_start": 0,
            "interval_step": 0,
            "interval_max": 0,
        }
    results: dict[str, Any] = {"visibility_timeout": vt}
    tls: dict[str, Any] = {}
    scheme = settings.broker.split("://", 1)[0]
    if scheme == "sentinel":
        # the master the Sentinels name, for the broker and for a result backend set to the
        # same sentinel:// URL (dres ignores results: none is configured here)
        master = {"master_name": settings.redis_master}
        transport |= master | {"sentinel_kwargs": _sentinel_kwargs(settings, publish_timeout_s)}
        results |= master
        if settings.sentinel_tls:
            tls["broker_use_ssl"] = broker_tls(settings)
    extra = [name.strip() for name in settings.celery_include.split(",") if name.strip()]
    app = Celery("dres", broker=settings.broker, include=["tasks.chunks", *extra], amqp=broker.AMQP)
    app.conf.update(
        DURABLE_CHUNKS,
        broker_transport_options=transport,
        result_backend_transport_options=results,
        visibility_timeout=vt,
        task_annotations={
            CHUNK_TASK: _limits(settings, "foreground"),
            CHUNK_TASK_BACKGROUND: _limits(settings, "background"),
        },
        task_default_queue=settings.foreground_queue,
        task_queues=(Queue(settings.foreground_queue), Queue(settings.background_queue)),
        **fail_fast,
        **tls,
    )
    if scheme in broker.SCHEMES:
        app.conf.broker_transport = broker.TRANSPORT  # a kombu bug's workaround
    elif scheme == "sentinel":
        app.conf.broker_transport = broker.SENTINEL_TRANSPORT  # the same fix, through Sentinel
    app.conf.dres_settings = settings
    return app


def _sentinel_kwargs(settings: Settings, timeout_s: float | None) -> dict[str, Any]:
    """The options of kombu's clients of the Sentinels themselves (not of the master): the
    ledger's (``worker.edges.redis.sentinel.sentinel_options``), the API's timeout if shorter."""
    timeout = SENTINEL_TIMEOUT_S if timeout_s is None else min(timeout_s, SENTINEL_TIMEOUT_S)
    return sentinel_options(settings, timeout)


def broker_tls(settings: Settings) -> dict[str, Any]:
    """``broker_use_ssl`` of a Sentinel broker: the ledger master's TLS options, as redis-py
    keyword arguments. kombu's ``SentinelChannel`` opens TLS connections to the master
    (``connection_class_ssl``) only when this dict is not empty, so redis-py's default,
    ``ssl_cert_reqs=required``, is said here: a bare ``rediss://`` URL checks certificates in the
    broker as in the ledger."""
    options = {name: value for name, value in settings.sentinel_tls.items() if name != "ssl"}
    return {"ssl_cert_reqs": "required"} | options


def _limits(settings: Settings, mode: str) -> dict[str, float]:
    soft, hard = settings.limits(mode)
    return {"soft_time_limit": soft, "time_limit": hard}


@signals.task_prerun.connect
def _bind_log_context(sender: Any = None, args: Any = None, **_: Any) -> None:
    """Bind turn_id and run_id once per chunk task; it adds ``chunk`` after its claim."""
    structlog.contextvars.clear_contextvars()
    if getattr(sender, "name", None) in CHUNK_TASKS and args and len(args) >= 2:
        structlog.contextvars.bind_contextvars(turn_id=args[0], run_id=args[1])


@signals.task_postrun.connect
def _clear_log_context(**_: Any) -> None:
    structlog.contextvars.clear_contextvars()
