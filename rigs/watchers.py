"""Many live watchers of an API's event streams, and the Redis connections a process holds.

``Watcher`` is one SSE client of ``GET /v1/turns/{id}/events`` (``watch`` follows it with an
``httpx.AsyncClient`` until the server closes it), noting what it got and when its newest text
came. ``redis_connections`` counts a process's open TCP connections to a Redis port, read from
``/proc`` (Linux), so a test or a bench sees what an API process holds, not what Redis says of
every client. ``playing`` makes turns whose runs the caller plays (no worker): claimed, ready for
``say``.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from worker.edges.runtime import Runtime
from worker.engine.recorder import RunContext


@dataclass(eq=False)
class Watcher:
    """One client of a turn's event stream: the status it was answered, what it got."""

    turn_id: str
    status: int = 0
    #: the body of an answer other than 200
    refused: str = ""
    ids: list[str] = field(default_factory=list)
    types: list[str] = field(default_factory=list)
    text: str = ""
    #: ``time.time()`` when its newest text arrived
    text_at: float = 0.0
    #: set at its first event, or when it was refused
    started: asyncio.Event = field(default_factory=asyncio.Event)


async def watch(client: httpx.AsyncClient, watcher: Watcher) -> Watcher:
    """Follow the watcher's turn until the server closes the stream."""
    url = f"/v1/turns/{watcher.turn_id}/events"
    try:
        async with client.stream("GET", url) as response:
            watcher.status = response.status_code
            if response.status_code != 200:
                watcher.refused = (await response.aread()).decode()
                return watcher
            event = ""
            async for line in response.aiter_lines():
                if line.startswith("id:"):
                    watcher.ids.append(line[3:].strip())
                elif line.startswith("event:"):
                    event = line[6:].strip()
                elif line.startswith("data:"):
                    watcher.types.append(event)
                    if event == "text":
                        watcher.text += json.loads(line[5:])["text"]
                        watcher.text_at = time.time()
                    watcher.started.set()
    finally:
        watcher.started.set()
    return watcher


async def all_started(watchers: list[Watcher], timeout: float) -> None:
    """Every watcher got its first event (or its answer), within ``timeout`` seconds."""
    async with asyncio.timeout(timeout):
        await asyncio.gather(*(w.started.wait() for w in watchers))


def redis_connections(pid: int, port: int) -> int:
    """The process's open TCP connections to ``port`` (a Redis server on this host)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    for table in ("tcp", "tcp6"):
        path = Path(f"/proc/{pid}/net/{table}")
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            cols = line.split()
            remote_port = int(cols[2].rsplit(":", 1)[1], 16)
            established = cols[3] == "01"
            if established and remote_port == port and cols[9] in inodes:
                count += 1
    return count


def playing(rt: Runtime, count: int, message: str = "watch me") -> list[RunContext]:
    """``count`` new turns, each claimed by the caller, who plays its run (``say``, ``finish``)."""
    runs = []
    for _ in range(count):
        turn = rt.lifecycle.create(message)
        run = rt.lifecycle.claim(turn.turn_id, turn.run_id)
        assert run is not None, "a new turn is claimed"
        runs.append(run)
    return runs
