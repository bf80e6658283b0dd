"""Sending a recorded run's message, and asking the broker whether a run's message is there."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

import structlog

from ledger.turns import Outgoing

log = structlog.get_logger("dres.dispatch")


class Dispatcher(Protocol):
    def dispatch(self, turn_id: str, run_id: str, mode: str) -> None:
        """Send the message that runs ``run_id`` (ids only)."""

    def prepare(self, turn_id: str, run_id: str, mode: str) -> Outgoing | None:
        """The message ``dispatch`` would send, made but not sent, for a step to send with
        itself (the ledger's hand-over, in its own atomic step); None when it cannot go that
        way (the broker is not the ledger's server, or its transport keeps no marks): then
        ``dispatch`` sends it after the step."""

    def prepare_all(self, runs: Sequence[tuple[str, str, str]]) -> list[Outgoing | None]:
        """``prepare`` for several runs, (turn_id, run_id, mode) each, in order (the reaper's
        timers that fell due together); a dispatcher may make them faster than one by one."""

    def revoke(self, turn_id: str, run_id: str) -> None:
        """Best effort: tell the workers not to run a queued message."""

    def marked(self, turn_id: str, run_id: str) -> bool:
        """True: the run's message is in the broker (queued or held unacknowledged), as its mark
        there says, a cost of O(1); False: no mark, which does not say lost (a transport that
        keeps none): ``queued_runs`` decides then."""

    def queued_runs(self) -> set[str] | None:
        """The run ids whose messages wait in the broker or are held unacknowledged by a worker;
        None when the broker cannot be looked into (then nothing is taken for lost)."""

    def backlog(self) -> int | None:
        """How many messages wait in the chunk queues, at O(1) (no message read); None when the
        broker cannot be looked into."""

    def queue_keys(self) -> tuple[str, ...] | None:
        """The keys of the chunk queues' lists when the broker is the ledger's own server, for a
        ledger script to read their lengths itself (tenant admission); None otherwise."""


def task_id(turn_id: str, run_id: str) -> str:
    """Deterministic: a repeated dispatch of one run is recognisably the same message."""
    return f"{turn_id}:{run_id}"


def run_ids(messages: Iterable[Any]) -> set[str]:
    """The run ids named by kombu Redis-transport messages (a queue's JSON messages, or the
    ``unacked`` hash's ``[message, exchange, routing key]`` values); others are passed over."""
    found = set()
    for raw in messages:
        try:
            message = json.loads(raw)
            if isinstance(message, list):
                message = message[0]
            found.add(str(message["headers"]["id"]).rpartition(":")[2])
        except (ValueError, KeyError, IndexError, TypeError):
            continue
    return found
