"""Write durability levels (docs/faults.md, ``DRES_DURABILITY``): what each level asks of Redis,
the start-time verdicts, and what the executor and the loop do with a confirmation's answer.

fakeredis has neither ``WAIT`` nor ``WAITAOF``: the runs here get a scripted confirmer in place of
``ledger.durability.Confirmer`` (tests/integration/test_durability.py runs the real one on real
servers).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fakeredis
import pytest
from harness import Harness

from ledger.durability import Confirmation, Durability
from ledger.errors import StoreFull
from ledger.events import ToolDone
from ledger.journal import build_journal
from worker.base.errors import ConfigError
from worker.base.settings import load_settings
from worker.demo_tools import outbox
from worker.edges.redis.durability import Capability, refusals
from worker.edges.runtime import Runtime
from worker.engine.tools.durable import NOT_RUN

EMAIL = {"to": "ada@example.com", "subject": "Launch", "body": "Friday at 10."}
SEND = {"tool_calls": [{"name": "send_email", "input": EMAIL}]}
READ = {"tool_calls": [{"name": "list_outbox", "input": {}}]}
DONE = {"text": "Done."}


# -- the levels ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("level", "command"),
    [
        ("replica", ("WAIT", 1, 1500)),
        ("fsync", ("WAITAOF", 1, 0, 1500)),
        ("replica+fsync", ("WAITAOF", 1, 1, 1500)),
    ],
)
def test_each_level_asks_its_wait_with_the_timeout_in_milliseconds(
    level: Any, command: tuple[Any, ...]
) -> None:
    durability = Durability(level, 1.5)
    assert durability.waits and durability.command() == command


def test_ack_waits_for_nothing_and_a_timeout_rounds_up_to_a_whole_millisecond() -> None:
    assert not Durability().waits
    assert Durability("replica", 0.0001).timeout_ms == 1  # WAIT's 0 would block for ever


@pytest.mark.parametrize(
    ("level", "reply", "enough"),
    [
        ("replica", 1, True),
        ("replica", 0, False),  # WAIT's count on timeout: not an error, a short answer
        ("fsync", [1, 0], True),
        ("fsync", [0, 0], False),
        ("replica+fsync", [1, 0], False),
        ("replica+fsync", [0, 1], False),
        ("replica+fsync", [1, 2], True),
    ],
)
def test_a_confirmation_is_enough_only_when_every_count_reaches_what_the_level_asks(
    level: Any, reply: Any, enough: bool
) -> None:
    durability = Durability(level)
    assert durability.enough(*durability.counts(reply)) is enough


def test_the_settings_name_a_bad_level_or_timeout_in_one_line() -> None:
    assert load_settings().durability == "ack"
    with pytest.raises(ConfigError, match=r"^DRES_DURABILITY: .*'replica\+fsync'"):
        load_settings(durability="disk")
    with pytest.raises(ConfigError, match=r"^DRES_DURABILITY_TIMEOUT_S: "):
        load_settings(durability_timeout_s=0)


def test_at_ack_a_worker_has_no_confirmer_at_all() -> None:
    assert Runtime.from_settings(load_settings()).confirmer is None
    runtime = Runtime.from_settings(load_settings(durability="replica"))
    assert runtime.confirmer is not None and runtime.confirmer.durability.level == "replica"


# -- the start-time verdicts --------------------------------------------------------------------

OLD = Capability("r:1", version="7.0.15", waitaof=False, aof=True, replicas=1)
NEW = Capability("r:2", version="7.2.4", waitaof=True, aof=True, replicas=1)


@pytest.mark.parametrize(
    ("level", "server", "said"),
    [
        (
            "fsync",
            OLD,
            ["needs WAITAOF (Redis 7.2 or later), and the ledger's Redis at r:1 is 7.0"],
        ),
        ("fsync", Capability("r:2", waitaof=True, aof=False), ["needs the AOF on"]),
        ("replica", Capability("r:1", replicas=0), ["needs a replica online"]),
        ("replica", Capability("r:1", role="slave", replicas=0), ["is a replica"]),
        ("replica+fsync", Capability("r:1"), ["needs WAITAOF", "needs a replica online"]),
        ("replica", OLD, []),
        ("fsync", NEW, []),
        ("replica+fsync", NEW, []),
        ("ack", Capability("r:1", role="slave"), []),
        ("replica", Capability("r:1", reached=False), []),  # warned about, not refused
    ],
)
def test_a_level_the_server_cannot_give_is_refused_saying_why(
    level: Any, server: Capability, said: list[str]
) -> None:
    found = refusals(server, Durability(level))
    assert len(found) == len(said)
    for clause, part in zip(found, said, strict=True):
        assert part in clause and f"DRES_DURABILITY={level}" in clause


# -- the executor and the loop, with a scripted confirmer ---------------------------------------


@dataclass
class Scripted:
    """Stands in for ``Confirmer``: answers ``ok``, ``short`` (a count under the level), ``gone``
    (the record is not in the stream) or ``full`` (StoreFull), in order, then ``ok``; keeps the
    type of each record it was asked about."""

    h: Harness
    answers: list[str] = field(default_factory=list)
    asked: list[str] = field(default_factory=list)

    def confirm(self, turn_id: str, stream_id: str) -> Confirmation:
        [at] = self.h.ledger.read_from(turn_id, stream_id)[:1]
        self.asked.append(at.event.type)
        answer = self.answers.pop(0) if self.answers else "ok"
        if answer == "full":
            raise StoreFull("confirm")
        if answer == "gone":
            return Confirmation(stream_id, present=False)
        return Confirmation(stream_id, True, replicas=int(answer == "ok"), ok=answer == "ok")


@pytest.fixture
def h(tmp_path: Path) -> Harness:
    return Harness(fakeredis.FakeRedis(), tmp_path)


@pytest.fixture
def confirms(h: Harness) -> Scripted:
    h.durable = Scripted(h)
    return h.durable  # type: ignore[no-any-return]


def dones(h: Harness) -> list[ToolDone]:
    return [e for e in h.events("tool_done") if isinstance(e, ToolDone)]


def test_a_write_runs_between_its_confirmed_start_and_its_confirmed_done(
    h: Harness, confirms: Scripted
) -> None:
    h.start([SEND, DONE])
    assert h.run_to_end().status == "completed"
    assert confirms.asked == ["tool_start", "tool_done"]
    assert len(outbox(h.client)) == 1


def test_a_read_only_tool_and_every_other_event_confirm_nothing(
    h: Harness, confirms: Scripted
) -> None:
    h.start([READ, {"text": "Nothing was sent."}])
    assert h.run_to_end().status == "completed"
    assert confirms.asked == []


def test_a_start_that_falls_short_closes_the_call_unrun_and_the_run_resumes(
    h: Harness, confirms: Scripted
) -> None:
    """The effect does not run; the call is closed with an error result (neither completed nor
    interrupted), the run resumes as after a transport error, and the model's repeat runs."""
    confirms.answers = ["short"]
    h.start([SEND, DONE], on_resume="restart")
    assert h.run_to_end().status == "completed"
    first, second = dones(h)
    assert first.is_error and first.result == {"error": NOT_RUN}
    assert not second.is_error
    assert [e.cause for e in h.events("resumed")] == ["transport_error"]  # type: ignore[attr-defined]
    assert len(outbox(h.client)) == 1, "the effect ran once, after a confirmed start"
    assert confirms.asked == ["tool_start", "tool_start", "tool_done"]
    journal = build_journal(h.events())
    assert (len(journal.completed), len(journal.interrupted)) == (1, 0)


def test_a_start_never_confirmed_stops_the_turn_as_a_transport_error_with_no_effect(
    h: Harness, confirms: Scripted
) -> None:
    confirms.answers = ["short"] * 10
    h.start([SEND, DONE], on_resume="restart")
    ended = h.run_to_end()
    assert (ended.status, ended.code, ended.can_continue) == ("stopped", "transport_error", True)
    assert outbox(h.client) == []
    assert all(d.is_error for d in dones(h))
    assert len(dones(h)) == h.settings.max_transport_resumes + 1


def test_a_done_that_falls_short_is_asked_again_before_the_turn_goes_on(
    h: Harness, confirms: Scripted
) -> None:
    confirms.answers = ["ok", "short", "short"]
    h.start([SEND, DONE])
    assert h.run_to_end().status == "completed"
    assert confirms.asked == ["tool_start", "tool_done", "tool_done", "tool_done"]
    assert len(outbox(h.client)) == 1


def test_a_done_never_confirmed_ends_the_run_as_a_transport_error_and_layer_2_blocks_the_repeat(
    h: Harness, confirms: Scripted
) -> None:
    h.ledger.outage_s = 0.05  # the window a done's confirmation is asked again in
    confirms.answers = ["ok"] + ["short"] * 10_000
    h.start([SEND, DONE], on_resume="restart")
    assert h.run_to_end().status == "completed"
    [resumed] = h.events("resumed")
    assert resumed.cause == "transport_error"  # type: ignore[attr-defined]
    [blocked] = h.events("tool_blocked")
    assert blocked.reason == "completed"  # type: ignore[attr-defined]
    assert len(outbox(h.client)) == 1


def test_a_done_gone_from_the_stream_ends_the_run_at_once(h: Harness, confirms: Scripted) -> None:
    confirms.answers = ["ok", "gone"]
    h.start([SEND, DONE], on_resume="restart")
    assert h.run_to_end().status == "completed"
    assert confirms.asked == ["tool_start", "tool_done"], "a lost record is not waited for"
    assert len(outbox(h.client)) == 1


def test_a_full_store_at_the_start_stops_the_turn_with_the_call_closed_unrun(
    h: Harness, confirms: Scripted
) -> None:
    confirms.answers = ["full"]
    h.start([SEND, DONE])
    ended = h.run_to_end()
    assert (ended.status, ended.code) == ("stopped", "store_full")
    [done] = dones(h)
    assert done.is_error and done.result == {"error": NOT_RUN}
    assert outbox(h.client) == []
