"""Who holds a turn: a run's lease, and the outcome of a claim."""

from __future__ import annotations

from dataclasses import dataclass, field

from ledger import keys
from ledger.codec import Envelope
from ledger.events import RunStarted
from ledger.turn import TurnMeta


@dataclass(slots=True)
class Lease:
    """A run's hold on a turn: its epoch, and the sequence of its next stream id (mutable)."""

    turn_id: str
    run_id: str
    epoch: int
    chunk: int
    cause: str = "first"
    seq: int = 1
    #: the last event appended and its stream id: appending it again returns that id
    last: tuple[str, str] = ("", "")
    #: the run's ``run_started`` at ``E-0`` (from its claim): the run's streamed text is stored
    #: compactly against it (``ledger.codec``); None: every event is stored as JSON
    opened: RunStarted | None = None
    #: the turn's stream (``keys.turn_events``), named once for every append of the run
    stream: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.stream = keys.turn_events(self.turn_id)

    def next_id(self) -> str:
        return f"{self.epoch}-{self.seq}"


@dataclass(frozen=True, slots=True)
class Claim:
    """The outcome of claiming a turn's pending run: a lease, or who holds the turn."""

    lease: Lease | None
    #: the turn's metadata as read just before the claim
    meta: TurnMeta | None = None
    status: str = ""
    holder: str = ""
    #: entries read in the claim's atomic step from stream id ``read_from`` (None: no read)
    entries: list[Envelope] | None = None
    read_from: str = ""
    #: the read reached the end of the stream (it is capped at a page)
    read_all: bool = False

    @property
    def claimed(self) -> bool:
        return self.lease is not None
