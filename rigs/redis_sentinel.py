"""A private Redis Sentinel set-up on loopback, for the Sentinel tests, the bench and chaos.

A primary and a replica (``worker.dev.redis_server.RedisServer``: AOF on, own directories, free
ports), and three sentinels, each ``redis-server CONFIG --sentinel`` with a config file of its own
that it may rewrite (sentinels do, to remember what they learn), monitoring the primary under
``MASTER`` with a quorum of 2, a 1 s ``down-after-milliseconds`` and a short failover timeout.
With ``password`` the data nodes require it (``requirepass``, and ``masterauth`` so that either
can replicate from the other after a failover) and the sentinels use it (``sentinel
auth-pass``); with ``sentinel_password`` the sentinels require one of their own (``requirepass``,
and ``sentinel sentinel-pass`` between them). With ``tls`` every node and sentinel serves TLS
only (``port 0``, ``tls-port``), replicates and monitors over TLS (``tls-replication yes``) and
asks its clients for a certificate (``tls-auth-clients``' default): one CA and one certificate
for all (``rigs.tls``), which ``url`` names in its query and ``client_options`` gives
this rig's own clients.

Ready once every sentinel names the primary as the master, knows the two other sentinels and
sees the replica with its link up. ``failover()`` runs ``SENTINEL FAILOVER`` and ``kill_master()``
SIGKILLs the master; ``wait_master(other_than=...)`` waits until every sentinel names another;
``restore(old)`` brings the old master back as a replica of the new one, so that the set-up can
fail over again (the chaos runner's failover trials, one after the other).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import redis

from rigs.tls import Certificates, make_certificates
from worker.dev.redis_server import (
    RedisServer,
    RedisServerError,
    answers_as,
    free_port,
    in_use,
    probe,
)

#: the master's name the sentinels monitor
MASTER = "dres-master"
#: seconds to wait for the set-up (or a failover) to settle
READY_S = 30.0
#: milliseconds of silence before a sentinel takes a node for down
DOWN_AFTER_MS = 1000
#: milliseconds a failover may take before the sentinels try another (and other timings)
FAILOVER_TIMEOUT_MS = 5000
#: sentinels that must agree a master is down before one fails it over
QUORUM = 2
POLL_S = 0.05
#: a master's full sync of a replica starts at once, not after 5 s (Redis's default)
SYNC_AT_ONCE = ("--repl-diskless-sync-delay", "0")


def replica_of(port: int) -> tuple[str, ...]:
    return ("--replicaof", "127.0.0.1", str(port))


class LocalSentinel:
    def __init__(
        self,
        *,
        sentinels: int = 3,
        password: str = "",
        sentinel_password: str = "",
        name: str = MASTER,
        conf: Callable[[int], list[str]] | None = None,
        tls: bool = False,
    ) -> None:
        """``conf``: the sentinels' own settings given the primary's port (``compose.yaml``'s,
        say), instead of this rig's monitor, timings and passwords; each still gets its own
        port, directory and log. ``tls``: TLS only, everywhere (the module says how)."""
        self.binary = shutil.which("redis-server")
        if not self.binary:
            raise RedisServerError("redis-server is not installed (apt-get install redis-server)")
        self.password = password
        self.sentinel_password = sentinel_password
        #: the master's name the sentinels monitor
        self.name = name
        self.conf = conf or self._conf
        #: the certificates of a TLS set-up (None: plain TCP)
        self.tls: Certificates | None = None
        if tls:
            self.tls = make_certificates(Path(tempfile.mkdtemp(prefix="dres-sentinel-tls-")))
        #: every data node's options: the password to replicate with, and a full sync that
        #: starts at once (a master waits 5 s by default, for more replicas to share it)
        self.options = (*(("--masterauth", password) if password else ()), *SYNC_AT_ONCE)
        primary = self._node(self.options)
        replica = self._node(self.options)  # of the primary: ``start()`` adds it
        #: the data nodes, the primary first; ``master`` says which one is the master now
        self.nodes = [primary, replica]
        self.dir = Path(tempfile.mkdtemp(prefix="dres-sentinel-"))
        self.ports = [free_port() for _ in range(sentinels)]
        self.sentinels: list[subprocess.Popen[bytes]] = []

    # -- what dres is told --------------------------------------------------------------------

    @property
    def addresses(self) -> str:
        """``DRES_REDIS_SENTINELS``: ``host:port,host:port,...``"""
        return ",".join(f"127.0.0.1:{port}" for port in self.ports)

    @property
    def url(self) -> str:
        """``DRES_REDIS_URL`` under Sentinel: only its password, database and, with TLS
        (``rediss://``), its ``ssl_*`` options count."""
        userinfo = f":{self.password}@" if self.password else ""
        if self.tls is None:
            return f"redis://{userinfo}sentinel-finds-the-master/0"
        query = urlencode({k: v for k, v in self.client_options.items() if k != "ssl"})
        return f"rediss://{userinfo}sentinel-finds-the-master/0?{query}"

    @property
    def client_options(self) -> dict[str, Any]:
        """redis-py's options of a client of a node or a sentinel: none, or TLS's."""
        return {} if self.tls is None else self.tls.client_options()

    def env(self) -> dict[str, str]:
        """The DRES_* settings that point dres at this set-up."""
        env = {
            "DRES_REDIS_URL": self.url,
            "DRES_REDIS_SENTINELS": self.addresses,
            "DRES_REDIS_MASTER": self.name,
        }
        if self.sentinel_password:
            env["DRES_REDIS_SENTINEL_PASSWORD"] = self.sentinel_password
        return env

    # -- starting and stopping ----------------------------------------------------------------

    def start(self) -> LocalSentinel:
        try:
            primary, replica = self.nodes
            self._start_node(primary)
            # the primary's port is known for sure once it started (a plain one may have moved)
            replica.extra = (*self._node_listen(replica.port), *self.options)
            replica.extra += replica_of(primary.port)
            self._start_node(replica)
            for index, port in enumerate(self.ports):
                self.sentinels.append(self._start_sentinel(index, port))
            self.wait_master(self.nodes[0].port)
        except BaseException:
            self.cleanup()
            raise
        return self

    def _node(self, extra: tuple[str, ...]) -> RedisServer:
        if self.tls is None:
            return RedisServer(extra=extra)
        port = free_port()
        listen = self._node_listen(port)
        return RedisServer(port=port, extra=(*listen, *extra), client_options=self.client_options)

    def _node_listen(self, port: int) -> tuple[str, ...]:
        """A data node's arguments for its port: none (plain, ``RedisServer``'s), or TLS only."""
        if self.tls is None:
            return ()
        options = [("port", "0"), ("tls-port", str(port)), *self.tls.server_options()]
        return tuple(arg for name, value in options for arg in (f"--{name}", value))

    def _start_node(self, node: RedisServer) -> None:
        node.start()  # it answers PING without the password first: then it is set
        if self.password:
            with redis.Redis(port=node.port, socket_timeout=5, **self.client_options) as client:
                client.config_set("requirepass", self.password)

    def _listen(self, port: int) -> list[str]:
        """A sentinel's config lines for its port: plain, or TLS only (``tls-replication``:
        TLS to the nodes it monitors and to the other sentinels too)."""
        if self.tls is None:
            return [f"port {port}"]
        options = self.tls.server_options()
        return ["port 0", f"tls-port {port}", *(f"{name} {value}" for name, value in options)]

    def _conf(self, primary: int) -> list[str]:
        name = self.name
        lines = [
            f"sentinel monitor {name} 127.0.0.1 {primary} {QUORUM}",
            f"sentinel down-after-milliseconds {name} {DOWN_AFTER_MS}",
            f"sentinel failover-timeout {name} {FAILOVER_TIMEOUT_MS}",
            f"sentinel parallel-syncs {name} 1",
        ]
        if self.password:
            lines.append(f"sentinel auth-pass {name} {self.password}")
        if self.sentinel_password:
            secret = self.sentinel_password
            lines += [f"requirepass {secret}", f"sentinel sentinel-pass {secret}"]
        return lines

    def _start_sentinel(self, index: int, port: int, moves: int = 5) -> subprocess.Popen[bytes]:
        """``moves``: times it may take another port when another process took its own
        between ``free_port()`` and its start (the set-up is not started yet: nobody knows
        the port but this rig)."""
        home = self.dir / f"sentinel-{index}"
        home.mkdir(exist_ok=True)
        lines = [
            *self.conf(self.nodes[0].port),
            *self._listen(port),  # after ``conf``: the last one counts
            "bind 127.0.0.1",
            "daemonize no",
            f"dir {home}",
            f"logfile {home / 'sentinel.log'}",
        ]
        config = home / "sentinel.conf"
        config.write_text("\n".join(lines) + "\n")
        process = subprocess.Popen(
            [self.binary or "redis-server", str(config), "--sentinel"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + RedisServer.START_TIMEOUT_S
        options = {"password": self.sentinel_password or None, **self.client_options}
        with probe(port, options) as client:
            while True:
                if process.poll() is not None:
                    log = home / "sentinel.log"
                    if moves and in_use(log):
                        log.unlink()
                        self.ports[index] = free_port()
                        return self._start_sentinel(index, self.ports[index], moves - 1)
                    raise RedisServerError(
                        f"redis-server --sentinel exited with {process.returncode}; see {log}"
                    )
                if answers_as(client, process.pid):
                    return process
                if time.monotonic() > deadline:
                    process.kill()
                    raise RedisServerError(f"sentinel on {port} did not answer")
                time.sleep(POLL_S)

    def cleanup(self) -> None:
        for process in self.sentinels:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=10)
        self.sentinels = []
        for node in self.nodes:
            node.cleanup()
        shutil.rmtree(self.dir, ignore_errors=True)
        if self.tls is not None:
            shutil.rmtree(self.tls.ca.parent, ignore_errors=True)

    def __enter__(self) -> LocalSentinel:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    # -- looking -------------------------------------------------------------------------------

    @contextmanager
    def sentinel(self, index: int) -> Iterator[redis.Redis]:
        client = redis.Redis(
            port=self.ports[index],
            password=self.sentinel_password or None,
            socket_timeout=2,
            decode_responses=True,
            **self.client_options,
        )
        try:
            yield client
        finally:
            client.close()

    def node(self, port: int) -> redis.Redis:
        """A plain client of the data node on ``port`` (the caller closes it)."""
        return redis.Redis(
            port=port, password=self.password or None, socket_timeout=10, **self.client_options
        )

    def master_client(self) -> redis.Redis:
        """A plain client of the node every sentinel names the master now."""
        return self.node(self.master_port())

    def master_port(self) -> int:
        with self.sentinel(0) as client:
            state: Any = client.sentinel_master(self.name)
        return int(state["port"])

    def _settled(self, index: int, master: int | None, other_than: int | None) -> int | None:
        """The master's port if sentinel ``index`` names a healthy master as wanted, knows the
        other sentinels and sees a replica with its link up; else None."""
        try:
            with self.sentinel(index) as client:
                state: Any = client.sentinel_master(self.name)
                port = int(state["port"])
                if (master is not None and port != master) or port == other_than:
                    return None
                if state["flags"] != "master" or state["num-other-sentinels"] < len(self.ports) - 1:
                    return None
                if other_than is not None:
                    return port  # the old master may be dead: no replica to wait for
                replicas: list[dict[str, Any]] = client.sentinel_slaves(self.name)
        except redis.RedisError:
            return None
        up = [r for r in replicas if r["flags"] == "slave" and r["master-link-status"] == "ok"]
        return port if up else None

    def wait_master(
        self, master: int | None = None, *, other_than: int | None = None, timeout: float = READY_S
    ) -> int:
        """Until every sentinel names the same healthy master (``master``, or any but
        ``other_than``); its port."""
        deadline = time.monotonic() + timeout
        while True:
            seen = {self._settled(i, master, other_than) for i in range(len(self.ports))}
            if len(seen) == 1 and None not in seen:
                return seen.pop() or 0
            if time.monotonic() > deadline:
                raise RedisServerError(f"the sentinels did not agree on a master in {timeout} s")
            time.sleep(POLL_S)

    # -- faults --------------------------------------------------------------------------------

    def failover(self) -> int:
        """``SENTINEL FAILOVER``: the replica is promoted while the master still runs (it is made
        a replica seconds later). Returns the old master's port once the failover has started."""
        old = self.master_port()
        with self.sentinel(0) as client:
            client.sentinel_failover(self.name)
        return old

    def kill_master(self) -> int:
        """SIGKILL the master (a crash). Returns its port."""
        old = self.master_port()
        for node in self.nodes:
            if node.port == old and node.process is not None:
                os.kill(node.process.pid, signal.SIGKILL)
                node.process.wait(timeout=10)
                node.process = None
        return old

    def restore(self, old: int, timeout: float = READY_S) -> int:
        """After a failover away from ``old``: that node back as a replica of the new master,
        started again if it was killed, else told so at once (the Sentinels would, seconds
        later); until it has synced and every Sentinel names the new master and sees the node as
        a replica that is up. Returns the new master's port.

        Not ``wait_master``: a Sentinel takes a replica's link state from the replica's INFO,
        which it reads every 10 s, and it last read the node ``SENTINEL FAILOVER`` demotes while
        that was the master: it would call the link down for up to 10 s after the node itself
        says it is up."""
        new = self.wait_master(other_than=old, timeout=timeout)
        node = next(n for n in self.nodes if n.port == old)
        if node.process is None:
            node.extra = (*self._node_listen(old), *self.options, *replica_of(new))
            self._start_node(node)
        else:
            with self.node(old) as client:
                client.replicaof("127.0.0.1", new)
        deadline = time.monotonic() + timeout
        while not (
            self._synced(old, new) and all(self._sees(i, new, old) for i in range(len(self.ports)))
        ):
            if time.monotonic() > deadline:
                raise RedisServerError(f"{old} did not rejoin as a replica of {new} in {timeout} s")
            time.sleep(POLL_S)
        return new

    def _synced(self, port: int, master: int) -> bool:
        """The node on ``port`` replicates ``master`` with its link up."""
        try:
            with self.node(port) as client:
                info: Any = client.info("replication")
        except redis.RedisError:
            return False
        linked = info.get("role") == "slave" and info.get("master_link_status") == "up"
        return bool(linked and int(info.get("master_port", 0)) == master)

    def _sees(self, index: int, master: int, replica: int) -> bool:
        """Sentinel ``index`` names ``master`` a healthy master and ``replica`` a replica of it
        that answers."""
        try:
            with self.sentinel(index) as client:
                state: Any = client.sentinel_master(self.name)
                replicas: list[dict[str, Any]] = client.sentinel_slaves(self.name)
        except redis.RedisError:
            return False
        if int(state["port"]) != master or state["flags"] != "master":
            return False
        return any(int(r["port"]) == replica and r["flags"] == "slave" for r in replicas)
