"""The invariants of the chaos trials of tools from elsewhere (``chaos.elsewhere.check``) catch
what they exist for, on made-up events and server logs."""

from __future__ import annotations

from typing import Any

from chaos.elsewhere import check
from ledger.events import ToolStart
from ledger.signature import input_signature
from worker.engine.tools.context import idempotency_key

TURN = "turn_1"
SEND = {"to": "ada@example.com", "text": "hi"}


def start(tool: str, data: dict[str, Any], call_id: str = "call_1") -> ToolStart:
    return ToolStart(
        event_id=f"ev_{call_id}",
        turn_id=TURN,
        run_id="run_1",
        chunk=0,
        ts=0.0,
        call_id=call_id,
        tool=tool,
        input=data,
        signature=input_signature(data),
    )


def row(tool: str, data: dict[str, Any], occurrence: int = 0) -> dict[str, Any]:
    key = idempotency_key(TURN, tool, input_signature(data), occurrence)
    return {"tool": tool, "key": key, "input": data}


def test_one_request_per_recorded_write_holds() -> None:
    events = [start("x__send", SEND), start("x__charge", {"amount": 5}, "call_2")]
    rows = [row("x__send", SEND), row("x__charge", {"amount": 5}), row("x__charge", {"amount": 5})]
    assert check(events, rows, TURN) == []


def test_a_plain_write_that_reached_its_server_twice_is_a_violation() -> None:
    events = [start("x__send", SEND), start("x__send", SEND, "call_2")]
    found = check(events, [row("x__send", SEND), row("x__send", SEND)], TURN)
    assert any("reached its server 2 times" in v for v in found)
    assert any("started 2 times with one input" in v for v in found)


def test_an_idempotent_write_sent_under_two_keys_is_a_violation() -> None:
    events = [start("api__put_item", {"item_id": "i", "name": "n"})]
    data = {"item_id": "i", "name": "n"}
    rows = [row("api__put_item", data), row("api__put_item", data, occurrence=1)]
    assert any("under 2 keys" in v for v in check(events, rows, TURN))


def test_a_request_with_no_tool_start_is_a_violation() -> None:
    found = check([], [row("x__send", SEND)], TURN)
    assert found == [f"x__send request with no tool_start (key {row('x__send', SEND)['key']})"]
