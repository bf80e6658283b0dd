"""A private three-master Redis Cluster on loopback, for the cluster tests and the bench.

Three ``redis-server --cluster-enabled yes`` processes (AOF on, each in its own temporary
directory, free ports; ``worker.dev.redis_server.RedisServer``), joined with ``redis-cli --cluster
create … --cluster-replicas 0 --cluster-yes``; ready once every node reports
``cluster_state:ok``. ``restart(i)`` stops master ``i`` with ``SHUTDOWN`` (its AOF written) and
starts the same server again on the same port and directory, as an operator restarts a node.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from contextlib import suppress

import redis
import redis.cluster

from ledger import keys
from worker.dev.redis_server import RedisServer, RedisServerError, free_port

#: seconds to wait for the cluster (or a restarted node) to report ``cluster_state:ok``
READY_S = 30.0
#: milliseconds before the nodes take a silent node for failed (the restart test stays below)
NODE_TIMEOUT_MS = 5000
#: a node's cluster bus listens on its port + this
BUS_OFFSET = 10000


def cluster_port() -> int:
    """A free loopback port whose cluster bus port (+10000) is valid and free too."""
    while True:
        port = free_port()
        if port + BUS_OFFSET > 65535:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + BUS_OFFSET))
            except OSError:
                continue
        return port


class LocalCluster:
    def __init__(self, masters: int = 3) -> None:
        self.cli = shutil.which("redis-cli")
        if not self.cli:
            raise RedisServerError("redis-cli is not installed (apt-get install redis-tools)")
        options = (
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            str(NODE_TIMEOUT_MS),
        )
        self.nodes = [RedisServer(port=cluster_port(), extra=options) for _ in range(masters)]

    @property
    def url(self) -> str:
        """A node's URL: what ``DRES_REDIS_URL`` names with ``DRES_REDIS_CLUSTER=1``."""
        return self.nodes[0].url

    def start(self) -> LocalCluster:
        try:
            for node in self.nodes:
                node.start()
            addresses = [f"127.0.0.1:{node.port}" for node in self.nodes]
            create = [self.cli or "redis-cli", "--cluster", "create", *addresses]
            done = subprocess.run(
                [*create, "--cluster-replicas", "0", "--cluster-yes"],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            if done.returncode != 0:
                raise RedisServerError(f"redis-cli --cluster create failed: {done.stdout[-400:]}")
            self.wait_ok()
        except BaseException:
            self.cleanup()
            raise
        return self

    def wait_ok(self, timeout: float = READY_S) -> None:
        """Until every node reports ``cluster_state:ok`` and knows all masters."""
        deadline = time.monotonic() + timeout
        while not all(self._ok(node) for node in self.nodes):
            if time.monotonic() > deadline:
                raise RedisServerError(f"the cluster was not ok within {timeout} s")
            time.sleep(0.05)

    def _ok(self, node: RedisServer) -> bool:
        try:
            with redis.Redis(port=node.port, socket_timeout=2) as client:
                info: dict[str, object] = client.cluster("INFO")
                return (
                    str(info.get("cluster_state")) == "ok"
                    and int(str(info.get("cluster_known_nodes"))) == len(self.nodes)
                    and int(str(info.get("cluster_slots_ok"))) == 16384
                )
        except redis.RedisError:
            return False

    def client(self, **options: object) -> redis.cluster.RedisCluster:
        return redis.cluster.RedisCluster.from_url(self.url, **options)

    def node_client(self, index: int) -> redis.Redis:
        return redis.Redis(port=self.nodes[index].port, socket_timeout=10)

    def flushall(self) -> None:
        for index in range(len(self.nodes)):
            with self.node_client(index) as client:
                client.flushall()
                client.script_flush()

    def holder(self, key: str) -> int:
        """The index of the master that holds ``key``'s slot (CLUSTER KEYSLOT, CLUSTER SLOTS)."""
        with self.node_client(0) as client:
            slot = int(client.execute_command("CLUSTER KEYSLOT", key))
            ranges: list[list[object]] = client.execute_command("CLUSTER SLOTS")
        ports = [node.port for node in self.nodes]
        for first, last, master, *_ in ranges:
            if int(str(first)) <= slot <= int(str(last)):
                assert isinstance(master, list)
                return ports.index(int(master[1]))
        raise AssertionError(f"no master serves slot {slot}")

    def turn_holder(self, turn_id: str) -> int:
        """The master a turn's keys live on (its stream is really there, not only its slot)."""
        index = self.holder(keys.turn_events(turn_id))
        with self.node_client(index) as client:
            assert client.exists(keys.turn_events(turn_id)), f"{turn_id}: not on master {index}"
        return index

    def restart(self, index: int, between: Callable[[], None] = lambda: None) -> None:
        """``SHUTDOWN`` master ``index`` (AOF flushed), run ``between``, start it again."""
        node = self.nodes[index]
        # the server goes away as it answers, as it should
        with self.node_client(index) as client, suppress(redis.ConnectionError):
            client.shutdown(save=False, nosave=False)
        if node.process is not None:
            node.process.wait(timeout=30)
            node.process = None
        between()
        node.start()
        self.wait_ok()

    def cleanup(self) -> None:
        for node in self.nodes:
            node.cleanup()

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()
