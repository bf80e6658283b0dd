"""Row 2g of ``make bench`` (issue 37): row 2 where a ``dres worker -P gevent`` records a tool
call, in a process of its own that ``tool_call_bench.gevent_tool_call_rows`` starts.

The process is patched for gevent first, by the patch ``dres worker -P gevent`` makes
(``worker.edges.cli.pools.patch_for``, before anything imports ``socket`` or ``redis``), and the
row runs in a greenlet, as a chunk does, with the run's interrupts a greenlet's
(``GreenletInterrupts``): dres's recording and the two raw XADDs beside it both go through gevent's
cooperative sockets, on one ``redis.Redis`` client, in alternating blocks (row 2's method,
``bench.ledger_bench``). Its rows go to stdout as one line of JSON.

``python -m bench.gevent_tool_call HOST PORT BLOCKS OPS``
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from worker.edges.cli.pools import GEVENT, patch_for


def main(argv: Sequence[str]) -> int:
    host, port, blocks, ops = argv[0], int(argv[1]), int(argv[2]), int(argv[3])
    if not patch_for(("worker", "-P", GEVENT)):
        raise RuntimeError("gevent's patches were not applied")
    # imported only now, on the patched standard library (as the worker imports them)
    import json
    from dataclasses import asdict

    import gevent
    import redis

    from bench.tool_call_bench import bench_tool_call
    from ledger.store import Ledger
    from worker.edges.celery.greenlets import GreenletInterrupts

    client = redis.Redis(host=host, port=port)
    try:
        measured = gevent.spawn(
            bench_tool_call,
            Ledger(client),
            client,
            blocks,
            ops,
            guard=GreenletInterrupts(),
            breakdown=False,
        ).get()
    finally:
        client.close()
    print(json.dumps([asdict(row) for row in measured]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
