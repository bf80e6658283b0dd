"""What a worker's pool means to the runs it holds: one value, handed to the runtime.

A prefork pool process runs one chunk at a time; a gevent process (``dres worker -P gevent -c N``,
docs/deploy.md) runs many as greenlets of one thread. Three things of a run follow from that, and
``Pool`` names them:

- how interrupts reach a run (``interrupts``): by signal to the process (prefork's
  ``DeferSignals``), or thrown into the run's greenlet, the soft limit by the run's own timer
  (gevent's ``GreenletInterrupts``, ``worker.edges.celery.greenlets``);
- the process's heartbeat (``heartbeats``): one thread beating each run on its own tick
  (``Beats``), or one tick for every run in one round trip (``BatchedBeats``);
- whether the chunks share a process (``chunks_share_a_process``): then one flusher writes every
  run's streamed text (``worker.engine.flushes.SharedFlusher``), else each run's own.

The runtime (``worker.edges.runtime``) takes a pool and hands each part to what uses it, as
constructor arguments: a run's guard to its loop, the process's beats to each heartbeat, the
process's flusher to each recorder. ``dres worker`` names its pool once (``worker.edges.cli``);
a process that runs no worker (the API, a test) runs prefork's ways (``PREFORK``).
"""

from __future__ import annotations

from dataclasses import dataclass

from worker.engine.tools.guard import DeferSignals, Interrupts
from worker.lifecycle.heartbeat import Beats


@dataclass(frozen=True, kw_only=True)
class Pool:
    """A pool's ways with its runs (each default is prefork's)."""

    name: str
    #: a new run's interrupts are one of these (``AgentLoop``'s guard)
    interrupts: type[Interrupts] = DeferSignals
    #: the process's heartbeat, which every run's ``Heartbeat`` joins
    heartbeats: type[Beats] = Beats
    #: whether one process runs all its ``--concurrency`` chunks (else one each): its ledger
    #: client's connection pool is sized for them, and one flusher writes every run's streamed text
    chunks_share_a_process: bool = False


#: a process that runs one chunk at a time, interrupted by signals: the default
PREFORK = Pool(name="prefork")
