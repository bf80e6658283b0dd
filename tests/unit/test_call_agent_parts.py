"""call_agent's parts that need no app: DRES_AGENTS at start, its registration, reading SSE.

The tool itself is tested against a real second app in tests/integration/test_call_agent.py.
"""

from __future__ import annotations

import json

import pytest

from ledger.events import ModelStart, Text, TurnEnded
from worker.base.errors import ConfigError
from worker.base.settings import load_settings
from worker.base.tool_sources import AgentApp
from worker.engine.tools import Registry
from worker.engine.tools.sources.agents import Answer, agent_tools, sse_events

APPS = {"researcher": AgentApp(url="http://127.0.0.1:8001", token="t")}
BASE = {"turn_id": "turn_b", "run_id": "run_1", "chunk": 0, "ts": 1.0}


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ("{", "DRES_AGENTS: not JSON"),
        ('["http://x"]', "DRES_AGENTS: must be a JSON object"),
        ('{"b": {"token": "x"}}', "DRES_AGENTS: app 'b': url: missing"),
        ('{"b": {"url": "ftp://x"}}', "DRES_AGENTS: app 'b': url: must be an http:// or https://"),
        ('{"b": {"url": "x.io"}}', "DRES_AGENTS: app 'b': url: must be an http:// or https://"),
        ('{"b": {"url": "http://x", "tokn": "t"}}', "DRES_AGENTS: app 'b': tokn:"),
        ('{" ": {"url": "http://x"}}', "DRES_AGENTS: an app's name is empty"),
    ],
)
def test_a_bad_dres_agents_fails_at_start_with_one_line_naming_it(raw: str, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(agents=raw)
    assert str(caught.value).startswith(says) and "\n" not in str(caught.value)


def test_dres_agents_accepts_http_and_https_apps_with_or_without_a_token() -> None:
    raw = json.dumps({"a": {"url": "http://127.0.0.1:8001"}, "b": {"url": "https://b.io/x"}})
    assert load_settings(agents=raw).agents == raw


def test_call_agent_is_registered_as_an_idempotent_write_only_when_an_app_is_named() -> None:
    assert Registry().add_specs(*agent_tools({})).get("call_agent") is None
    spec = Registry().add_specs(*agent_tools(APPS)).get("call_agent")
    assert spec is not None
    assert (spec.read_only, spec.idempotent, spec.wants_ctx) == (False, True, True)
    assert set(spec.schema["properties"]) == {"agent", "message"}
    assert "researcher" in spec.description


def test_sse_events_yields_each_event_with_its_id_and_skips_comments_and_malformed_data() -> None:
    text = Text(event_id="e1", text="Paris", **BASE).model_dump_json()
    lines = [
        ": keepalive",
        "",
        "id: 2-0",
        "event: text",
        f"data: {text}",
        "",
        "id: 2-1",
        "data: {not json",
        "",
        "id: 2-2",
        'data: {"type": "no_such_event"}',
        "",
    ]
    assert [(sid, e.type) for sid, e in sse_events(lines)] == [("2-0", "text")]


def test_the_answer_is_the_last_model_calls_text_and_a_stop_carries_its_code() -> None:
    answer = Answer("turn_b")
    folded = [
        ModelStart(event_id="e1", step=0, **BASE),
        Text(event_id="e2", text="Looking it up.", **BASE),
        ModelStart(event_id="e3", step=1, **BASE),
        Text(event_id="e4", text="Paris is ", **BASE),
        Text(event_id="e5", text="the capital.", **BASE),
    ]
    assert not any(answer.add(e) for e in folded)
    assert answer.add(TurnEnded(event_id="e6", status="completed", **BASE))
    assert answer.outcome() == {
        "turn_id": "turn_b",
        "status": "completed",
        "text": "Paris is the capital.",
    }

    stopped = Answer("turn_b")
    stopped.add(TurnEnded(event_id="e7", status="stopped", code="cancelled", **BASE))
    assert stopped.outcome() == {
        "turn_id": "turn_b",
        "status": "stopped",
        "text": "",
        "code": "cancelled",
    }
