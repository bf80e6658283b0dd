"""How many live event streams one API process holds at once: ``DRES_MAX_STREAMS``, but never
more than its open-file limit allows (docs/configuration.md).

Each live stream holds its client's socket (on a Redis Cluster also the connection of its own
blocking read). Past the process's ``RLIMIT_NOFILE`` ``accept()`` fails: asyncio logs
"socket.accept() out of system resource" at every try, new connections wait unanswered in the
kernel's queue, and no route answers, ``/healthz`` included (issue 46: 1,100 streams at the usual
1,024 files). So at
start the API raises its soft limit to the hard one, and caps the streams below it, leaving room
for what does not grow with them:

- the descriptors open at start (the interpreter's, the logs', the stores' first connections);
- ``RESERVED_FILES``: Redis connections that do not grow with the streams (the short reads, at
  most ``fanout.SHORT_READS``, and the streams' one blocking reader; the 40 threads of the
  synchronous routes, each with a ledger and a broker connection), the listening socket, the
  page's files, the metrics;
- an eighth of the limit: the other routes' clients, and refused streams' connections until they
  are closed (a 503 closes its connection), so that both still fit while every stream is held.

At 1,024 files that is about 760 streams; from about 2,450 files, ``DRES_MAX_STREAMS`` (2,000)
itself.
"""

from __future__ import annotations

import os
import resource
from contextlib import suppress
from dataclasses import dataclass

#: descriptors kept for what does not grow with the streams (the module's docstring says what)
RESERVED_FILES = 128
#: the share of the limit kept for other clients and refused streams: one part in this many
SPARE_SHARE = 8
#: the soft limit asked for when the hard one is unlimited (Linux's default ``nr_open``)
UNLIMITED_ASK = 1 << 20


@dataclass(frozen=True)
class StreamCap:
    #: live streams the process serves at once
    streams: int
    #: DRES_MAX_STREAMS
    asked: int
    #: the soft open-file limit, after raising it
    files: int
    #: descriptors open at start
    open_at_start: int


def raise_file_limit() -> int:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard one (as far as the system lets it); the soft
    limit then."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = UNLIMITED_ASK if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < want:
        # the system may refuse (macOS past OPEN_MAX): the soft limit then stays
        with suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return UNLIMITED_ASK if soft == resource.RLIM_INFINITY else soft


def open_files() -> int:
    """Descriptors this process has open (0 where the system does not list them)."""
    for listing in ("/proc/self/fd", "/dev/fd"):
        try:
            return len(os.listdir(listing))
        except OSError:
            continue
    return 0


def stream_cap(asked: int, *, files_per_stream: int) -> StreamCap:
    """The cap on live streams: ``asked`` (DRES_MAX_STREAMS), or fewer when the open-file limit
    (raised first) cannot hold that many besides the rest; at least one."""
    files = raise_file_limit()
    now = open_files()
    room = files - now - RESERVED_FILES - files // SPARE_SHARE
    return StreamCap(min(asked, max(1, room // files_per_stream)), asked, files, now)
