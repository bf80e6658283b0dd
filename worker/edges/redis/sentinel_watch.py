"""This process's view of where a Sentinel-monitored master is, and whether a failover is
promoting a replica right now (``worker.edges.redis.sentinel`` says why its clients need it).

``MasterWatch`` listens on every Sentinel (a daemon thread each, in the process that started
them: a forked child starts its own) for ``+switch-master``, the failover leader's
``+failover-state-send-slaveof-noone`` and its aborts; ``newest_master`` decides, from what the
Sentinels say when asked, which master a new connection goes to.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

import redis
import structlog

from worker.base.forks import no_fork

log = structlog.get_logger("dres.sentinel")

#: the Sentinels' channel that announces a new master: ``NAME OLD-IP OLD-PORT NEW-IP NEW-PORT``
SWITCH_MASTER = "+switch-master"
#: the failover leader's event just before it sends ``REPLICAOF NO ONE`` to the replica it
#: chose: ``slave IP:PORT IP PORT @ NAME MASTER-IP MASTER-PORT``
PROMOTING = "+failover-state-send-slaveof-noone"
#: the leader's events when a failover is given up (``-failover-abort-not-elected``, ...)
ABORTED = "-failover-abort-*"
#: seconds commands wait after ``PROMOTING`` for ``+switch-master`` (about a second here), at most
FAILOVER_HOLD_S = 5.0
#: seconds between looks at a hold's end
HOLD_POLL_S = 0.01
#: seconds a listener waits for a message before it looks whether it should stop
LISTEN_S = 1.0
#: seconds between PINGs on a quiet subscription, so a dead Sentinel connection is noticed
WATCH_HEALTH_S = 5
#: seconds a listener waits before it subscribes again after losing its Sentinel, doubling
RESUBSCRIBE_FIRST_S = 0.1
RESUBSCRIBE_CAP_S = 2.0
Address = tuple[str, int]


def newest_master(
    states: Iterable[Mapping[str, Any] | None],
    *,
    min_others: int = 0,
    demoted: Collection[Address] = (),
) -> Address | None:
    """Of what the Sentinels said of one master (``SENTINEL MASTERS`` entries; None: one said
    nothing), the address of the healthy one with the highest ``config-epoch``, never one
    announced ``demoted`` since; None if none."""
    best: tuple[int, Address] | None = None
    for state in states:
        if not state or not state.get("is_master") or state.get("is_sdown"):
            continue
        if state.get("is_odown") or int(state.get("num-other-sentinels", 0)) < min_others:
            continue
        address = (str(state["ip"]), int(state["port"]))
        epoch = int(state.get("config-epoch", 0))
        if address not in demoted and (best is None or epoch > best[0]):
            best = (epoch, address)
    return None if best is None else best[1]


class MasterWatch:
    """Where one master is, as this process last heard: from a Sentinel's ``+switch-master``,
    or from asking the Sentinels; and whether a failover is promoting a replica right now (the
    leader's ``PROMOTING``), when a write sent to the old master would be lost: commands wait
    for the switch then (``FAILOVER_HOLD_S`` at most). Its listeners run in the process that
    started them; a forked child starts its own on its first command."""

    def __init__(self, sentinels: Sequence[Address], name: str, kwargs: Mapping[str, Any]) -> None:
        self.sentinels = list(sentinels)
        self.name = name
        self.kwargs = dict(kwargs)
        #: the master's address (None: not known yet)
        self.address: Address | None = None
        #: addresses announced as the old master since: discovery never goes back to them
        self.demoted: frozenset[Address] = frozenset()
        #: monotonic time a hold ends (0: none), and the Sentinel that began it
        self.held_until = 0.0
        self.held_by: Address | None = None
        self._pid = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()

    def start(self) -> None:
        if self._pid == os.getpid():
            return
        with self._lock:
            if self._pid == os.getpid():
                return
            self._pid = os.getpid()
            self._stop = threading.Event()
            for host, port in self.sentinels:
                thread = threading.Thread(
                    target=self._listen,
                    args=(host, port, self._stop),
                    name=f"dres-sentinel-{port}",
                    daemon=True,
                )
                thread.start()

    def stop(self) -> None:
        """Stop this process's listeners (within ``LISTEN_S``); the next command starts them."""
        self._stop.set()
        self._pid = 0

    def heard(self, channel: str, message: str, source: Address) -> None:
        """A Sentinel's event (``SWITCH_MASTER``, ``PROMOTING``, an abort) on ``channel``, from
        the Sentinel at ``source``."""
        words = message.split()
        if channel == SWITCH_MASTER:
            name, old_ip, old_port, ip, port = words
            if name != self.name:
                return
            new, old = (ip, int(port)), (old_ip, int(old_port))
            changed = self.address != new  # every Sentinel announces it: log it once
            self.demoted = (self.demoted | {old}) - {new}
            self.address, self.held_until = new, 0.0
            if changed:
                self._log("master switched: commands go to the new master", old=old, new=new)
            return
        name = words[words.index("@") + 1] if "@" in words else words[1]
        if name != self.name:
            return
        if channel == PROMOTING:
            self.held_until, self.held_by = time.monotonic() + FAILOVER_HOLD_S, source
            self._log("a replica is being promoted: commands wait for the switch", master=name)
        elif self.held_until and source == self.held_by:  # not another Sentinel's lost election
            self.held_until = 0.0
            self._log("failover aborted: commands go on", master=name, abort=channel)

    def _log(self, what: str, **fields: Any) -> None:
        with no_fork():  # a fork must not copy the logging lock held
            log.warning(what, **fields)

    def _listen(self, host: str, port: int, stop: threading.Event) -> None:
        delay = RESUBSCRIBE_FIRST_S
        while not stop.is_set():
            client = redis.Redis(host, port, health_check_interval=WATCH_HEALTH_S, **self.kwargs)
            pubsub = client.pubsub(ignore_subscribe_messages=True)
            try:
                pubsub.subscribe(SWITCH_MASTER, PROMOTING)
                pubsub.psubscribe(ABORTED)
                delay = RESUBSCRIBE_FIRST_S
                while not stop.is_set():
                    message = pubsub.get_message(timeout=LISTEN_S)
                    if message and message.get("type") in {"message", "pmessage"}:
                        self._hear(_text(message["channel"]), _text(message["data"]), (host, port))
            except (redis.RedisError, OSError):
                stop.wait(delay)  # this Sentinel is away: the others still speak
                delay = min(delay * 2, RESUBSCRIBE_CAP_S)
            finally:
                pubsub.close()
                client.close()

    def _hear(self, channel: str, message: str, source: Address) -> None:
        try:
            self.heard(channel, message, source)
        except (ValueError, IndexError):
            self._log("an unreadable Sentinel event, ignored", channel=channel, message=message)

    def held(self) -> float:
        """Seconds a command should still wait for a failover to switch (0: none)."""
        return max(0.0, self.held_until - time.monotonic()) if self.held_until else 0.0

    def wait(self) -> None:
        """Until no failover is promoting a replica (``FAILOVER_HOLD_S`` at most)."""
        while (left := self.held()) > 0:
            time.sleep(min(left, HOLD_POLL_S))

    def stale(self, host: object, port: object) -> bool:
        """True if a connection to ``host:port`` is not to the master as last heard."""
        return self.address is not None and (host, _port(port)) != self.address


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _port(port: object) -> int:
    try:
        return int(str(port))
    except ValueError:
        return 0
