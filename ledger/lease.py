"""Who holds a turn: its metadata as read, a run's lease, and the outcome of a claim."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ledger.codec import Envelope, text


@dataclass(frozen=True, slots=True)
class TurnMeta:
    """The metadata hash beside a turn's stream. Fields without a typed slot are in ``extra``."""

    turn_id: str
    status: str
    epoch: int
    runs: int
    chunk: int
    run_id: str
    next_run: str
    extra: Mapping[str, str]
    #: the turn's Stop flag was set when this was read (a claim reads it; ``Ledger.meta`` does not)
    stop_requested: bool = False

    @classmethod
    def from_hash(
        cls, turn_id: str, raw: Mapping[Any, Any], stop_requested: bool = False
    ) -> TurnMeta:
        fields = {text(k): text(v) for k, v in raw.items()}
        return cls(
            turn_id=turn_id,
            status=fields.pop("status", ""),
            epoch=int(fields.pop("epoch", 0)),
            runs=int(fields.pop("runs", 0)),
            chunk=int(fields.pop("chunk", 0)),
            run_id=fields.pop("run_id", ""),
            next_run=fields.pop("next_run", ""),
            extra=fields,
            stop_requested=stop_requested,
        )


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
