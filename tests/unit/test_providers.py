"""The provider adapters against a local server speaking each provider's streaming wire format.

No network: the SDKs are pointed at the fake provider (``rigs.providers``) on 127.0.0.1
through ``base_url``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from rigs.providers import (
    FakeProvider,
    ProviderServer,
    Reply,
    anthropic_error,
    anthropic_stream,
    chunk,
    fake_provider,
    openai_error,
    openai_stream,
    sse,
    text_block,
    tool_block,
    tool_delta,
    usage_chunk,
)
from tests.support import require_sdk
from worker.base.clock import SystemClock
from worker.base.errors import ConfigError, ModelError
from worker.engine.models import Models, make_model, providers
from worker.engine.models.base import (
    AssistantMessage,
    ModelEvent,
    ModelRequest,
    RecordedCall,
    TextDelta,
    ToolCall,
    ToolResultMessage,
    ToolSchema,
    Usage,
    UserMessage,
)
from worker.engine.models.providers import AnthropicModel, OpenAIModel

#: seconds any one request may take before the SDK gives up
TIMEOUT_S = 5.0


@pytest.fixture
def server() -> Iterator[FakeProvider]:
    with fake_provider() as fake:
        yield fake


def collect(model: AnthropicModel | OpenAIModel, request: ModelRequest) -> list[ModelEvent]:
    return list(model.stream(request))


def failure(model: AnthropicModel | OpenAIModel, request: ModelRequest) -> ModelError:
    with pytest.raises(ModelError) as info:
        collect(model, request)
    return info.value


TOOL = ToolSchema(
    "send_email",
    "Send an email.",
    {"type": "object", "properties": {"to": {"type": "string"}}, "required": ["to"]},
)
HISTORY = ModelRequest(
    system="You are terse.",
    messages=(
        UserMessage("Email a@x.io and b@x.io."),
        AssistantMessage(
            "Sending.",
            (
                RecordedCall("send_email", {"to": "a@x.io"}, call_id="call_a"),
                RecordedCall("send_email", {"to": "b@x.io"}, call_id="call_b"),
            ),
        ),
        ToolResultMessage("call_a", "send_email", '{"sent": true}'),
        ToolResultMessage("call_b", "send_email", "mailbox full", is_error=True),
        UserMessage("Continue from where you left off."),
    ),
    tools=(TOOL,),
)
SIMPLE = ModelRequest(system="", messages=(UserMessage("hi"),))


# -- Anthropic -----------------------------------------------------------------------------


def anthropic_model(fake: FakeProvider, **options: Any) -> AnthropicModel:
    require_sdk("anthropic")
    options.setdefault("timeout", TIMEOUT_S)
    options.setdefault("max_retries", 0)
    return AnthropicModel("claude-test", base_url=fake.url, api_key="test", **options)


def test_anthropic_streams_text_deltas_in_order_then_the_assembled_tool_call_then_its_usage(
    server: FakeProvider,
) -> None:
    server.replies.append(
        Reply(
            body=anthropic_stream(
                text_block(0, "Sending ", "it", " now."),
                tool_block(1, "toolu_1", "send_email", '{"to": ', '"a@x', '.io"}'),
                tool_block(2, "toolu_2", "list_inbox"),
            )
        )
    )
    events = collect(anthropic_model(server), HISTORY)
    assert events == [
        TextDelta("Sending "),
        TextDelta("it"),
        TextDelta(" now."),
        ToolCall("send_email", {"to": "a@x.io"}, "toolu_1"),
        ToolCall("list_inbox", {}, "toolu_2"),
        # input tokens from message_start, output tokens from the last message_delta
        Usage(3, 9),
    ]


def test_anthropic_request_carries_system_converted_history_and_tools(
    server: FakeProvider,
) -> None:
    server.replies.append(Reply(body=anthropic_stream(text_block(0, "ok"))))
    collect(anthropic_model(server, max_tokens=321), HISTORY)
    (received,) = server.received
    body = received.body
    assert received.path == "/v1/messages"
    assert body["stream"] is True
    assert (body["model"], body["max_tokens"], body["system"]) == (
        "claude-test",
        321,
        "You are terse.",
    )
    assert body["tools"] == [
        {"name": "send_email", "description": "Send an email.", "input_schema": TOOL.input_schema}
    ]
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Email a@x.io and b@x.io."}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Sending."},
                {
                    "type": "tool_use",
                    "id": "call_a",
                    "name": "send_email",
                    "input": {"to": "a@x.io"},
                },
                {
                    "type": "tool_use",
                    "id": "call_b",
                    "name": "send_email",
                    "input": {"to": "b@x.io"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "call_a",
                    "content": '{"sent": true}',
                    "is_error": False,
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "call_b",
                    "content": "mailbox full",
                    "is_error": True,
                },
                {"type": "text", "text": "Continue from where you left off."},
            ],
        },
    ]


def test_anthropic_malformed_tool_input_is_passed_on_raw_for_the_executor_to_reject(
    server: FakeProvider,
) -> None:
    server.replies.append(
        Reply(body=anthropic_stream(tool_block(0, "toolu_1", "send_email", '{"to')))
    )
    assert collect(anthropic_model(server), SIMPLE) == [
        ToolCall("send_email", '{"to', "toolu_1"),
        Usage(3, 9),
    ]


@pytest.mark.parametrize(
    ("status", "kind", "code"),
    [
        (429, "rate_limit_error", "rate_limit"),
        (529, "overloaded_error", "rate_limit"),
        (401, "authentication_error", "auth"),
        (403, "permission_error", "auth"),
        (400, "invalid_request_error", "invalid_request"),
        (404, "not_found_error", "invalid_request"),
        (500, "api_error", "http_5xx"),
        (503, "api_error", "http_5xx"),
    ],
)
def test_anthropic_http_errors_map_to_model_error_codes(
    server: FakeProvider, status: int, kind: str, code: str
) -> None:
    server.replies.append(anthropic_error(status, kind))
    error = failure(anthropic_model(server), SIMPLE)
    assert error.code == code
    assert error.resumable is (code == "http_5xx")


def test_anthropic_error_event_inside_a_stream_maps_by_its_type(server: FakeProvider) -> None:
    """An overloaded error sent mid-stream (after 200 OK) is a rate limit, not a 2xx success."""
    error_event = {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}
    body = sse([{"type": "ping"}]) + sse([error_event])
    server.replies.append(Reply(body=body))
    assert failure(anthropic_model(server), SIMPLE).code == "rate_limit"


def test_anthropic_stream_without_message_stop_is_a_resumable_stream_ended(
    server: FakeProvider,
) -> None:
    server.replies.append(Reply(body=anthropic_stream(text_block(0, "Half"), stop=False)))
    model = anthropic_model(server)
    events: list[ModelEvent] = []
    with pytest.raises(ModelError) as info:
        events.extend(model.stream(SIMPLE))
    assert events == [TextDelta("Half")]
    assert (info.value.code, info.value.resumable) == ("stream_ended", True)


def test_anthropic_connection_dropped_mid_stream_is_resumable(server: FakeProvider) -> None:
    server.replies.append(Reply(body=anthropic_stream(text_block(0, "Half"), stop=False), cut=True))
    error = failure(anthropic_model(server), SIMPLE)
    assert error.code in {"connection_reset", "stream_ended"}
    assert error.resumable


def test_anthropic_read_timeout_is_a_resumable_gateway_timeout(server: FakeProvider) -> None:
    server.replies.append(Reply(hang=True))
    error = failure(anthropic_model(server, timeout=0.2), SIMPLE)
    assert (error.code, error.resumable) == ("gateway_timeout", True)


def test_anthropic_unreachable_server_is_a_resumable_connection_reset() -> None:
    require_sdk("anthropic")
    # A port that was just listening and is now closed: the connection is refused.
    with ProviderServer() as closed:
        url = closed.fake.url
    model = AnthropicModel("m", base_url=url, api_key="test", max_retries=0, timeout=TIMEOUT_S)
    error = failure(model, SIMPLE)
    assert (error.code, error.resumable) == ("connection_reset", True)


# -- OpenAI --------------------------------------------------------------------------------


def openai_model(fake: FakeProvider, **options: Any) -> OpenAIModel:
    require_sdk("openai")
    options.setdefault("timeout", TIMEOUT_S)
    options.setdefault("max_retries", 0)
    return OpenAIModel("gpt-test", base_url=f"{fake.url}/v1", api_key="test", **options)


def test_openai_streams_text_deltas_then_tool_calls_assembled_by_index(
    server: FakeProvider,
) -> None:
    server.replies.append(
        Reply(
            body=openai_stream(
                chunk({"role": "assistant", "content": "Send"}),
                chunk({"content": "ing."}),
                chunk(tool_delta(0, call_id="call_1", name="send_email")),
                chunk(tool_delta(1, call_id="call_2", name="list_inbox")),
                chunk(tool_delta(0, args='{"to": "a@')),
                chunk(tool_delta(0, args='x.io"}')),
                chunk({}, finish="tool_calls"),
            )
        )
    )
    assert collect(openai_model(server), HISTORY) == [
        TextDelta("Send"),
        TextDelta("ing."),
        ToolCall("send_email", {"to": "a@x.io"}, "call_1"),
        ToolCall("list_inbox", {}, "call_2"),
    ]


def test_openai_asks_for_the_usage_and_reports_it_from_the_last_chunk_with_no_choices(
    server: FakeProvider,
) -> None:
    last = usage_chunk(prompt_tokens=40, completion_tokens=2)
    server.replies.append(Reply(body=openai_stream(chunk({"content": "ok"}, finish="stop"), last)))
    assert collect(openai_model(server), HISTORY) == [TextDelta("ok"), Usage(40, 2)]
    (received,) = server.received
    assert received.body["stream_options"] == {"include_usage": True}


def test_openai_request_carries_system_converted_history_and_tools(server: FakeProvider) -> None:
    server.replies.append(Reply(body=openai_stream(chunk({"content": "ok"}, finish="stop"))))
    collect(openai_model(server, max_tokens=321), HISTORY)
    (received,) = server.received
    body = received.body
    assert received.path == "/v1/chat/completions"
    assert (body["stream"], body["model"], body["max_completion_tokens"]) == (True, "gpt-test", 321)
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "send_email",
                "description": "Send an email.",
                "parameters": TOOL.input_schema,
            },
        }
    ]

    def call(call_id: str, to: str) -> dict[str, Any]:
        arguments = json.dumps({"to": to})
        return {
            "id": call_id,
            "type": "function",
            "function": {"name": "send_email", "arguments": arguments},
        }

    assert body["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Email a@x.io and b@x.io."},
        {
            "role": "assistant",
            "content": "Sending.",
            "tool_calls": [call("call_a", "a@x.io"), call("call_b", "b@x.io")],
        },
        {"role": "tool", "tool_call_id": "call_a", "content": '{"sent": true}'},
        {"role": "tool", "tool_call_id": "call_b", "content": "Error: mailbox full"},
        {"role": "user", "content": "Continue from where you left off."},
    ]


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (429, "rate_limit"),
        (401, "auth"),
        (403, "auth"),
        (400, "invalid_request"),
        (404, "invalid_request"),
        (422, "invalid_request"),
        (502, "http_5xx"),
        (503, "http_5xx"),
        (504, "http_5xx"),
    ],
)
def test_openai_http_errors_map_to_model_error_codes(
    server: FakeProvider, status: int, code: str
) -> None:
    server.replies.append(openai_error(status, "some_error"))
    error = failure(openai_model(server), SIMPLE)
    assert error.code == code
    assert error.resumable is (code == "http_5xx")


def test_openai_error_inside_a_stream_maps_by_its_type(server: FakeProvider) -> None:
    mid_stream = {"error": {"message": "upstream failed", "type": "server_error", "code": None}}
    body = openai_stream(chunk({"content": "Hel"}), mid_stream, done=False)
    server.replies.append(Reply(body=body))
    error = failure(openai_model(server), SIMPLE)
    assert (error.code, error.resumable) == ("http_5xx", True)


def test_openai_stream_without_a_finish_reason_is_a_resumable_stream_ended(
    server: FakeProvider,
) -> None:
    server.replies.append(Reply(body=openai_stream(chunk({"content": "Hel"}), done=False)))
    error = failure(openai_model(server), SIMPLE)
    assert (error.code, error.resumable) == ("stream_ended", True)


def test_openai_connection_dropped_mid_stream_is_resumable(server: FakeProvider) -> None:
    server.replies.append(
        Reply(body=openai_stream(chunk({"content": "Hel"}), done=False), cut=True)
    )
    error = failure(openai_model(server), SIMPLE)
    assert error.code in {"connection_reset", "stream_ended"}
    assert error.resumable


def test_openai_read_timeout_is_a_resumable_gateway_timeout(server: FakeProvider) -> None:
    server.replies.append(Reply(hang=True))
    error = failure(openai_model(server, timeout=0.2), SIMPLE)
    assert (error.code, error.resumable) == ("gateway_timeout", True)


def test_openai_missing_api_key_is_an_auth_error(monkeypatch: pytest.MonkeyPatch) -> None:
    require_sdk("openai")
    for name in ("OPENAI_API_KEY", "OPENAI_ADMIN_KEY"):
        monkeypatch.delenv(name, raising=False)
    model = OpenAIModel("gpt-test", base_url="http://127.0.0.1:9/v1", max_retries=0)
    assert failure(model, SIMPLE).code == "auth"


# -- building adapters ---------------------------------------------------------------------


def test_make_builds_the_adapter_for_each_provider() -> None:
    require_sdk("anthropic")
    require_sdk("openai")
    anthropic = providers.make("anthropic", "claude-x")
    openai = providers.make("openai", "gpt-x")
    assert isinstance(anthropic, AnthropicModel)
    assert isinstance(openai, OpenAIModel)
    assert (anthropic.name, openai.name) == ("anthropic:claude-x", "openai:gpt-x")


def test_make_with_an_unknown_provider_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown provider"):
        providers.make("mistral", "large")


def test_make_model_routes_provider_specs_through_make() -> None:
    require_sdk("anthropic")
    assert isinstance(make_model("anthropic:claude-x", SystemClock()), AnthropicModel)


def test_a_process_keeps_one_adapter_per_provider_spec_and_its_client() -> None:
    require_sdk("anthropic")
    models = Models()
    first = models.get("anthropic:claude-x", SystemClock())

    assert models.get("anthropic:claude-x", SystemClock()) is first
    assert models.get("anthropic:claude-y", SystemClock()) is not first


def test_adapters_beyond_the_bound_are_dropped_least_recently_used_first_and_closed() -> None:
    require_sdk("anthropic")
    clock = SystemClock()
    models = Models(max_adapters=2)
    first = models.get("anthropic:a", clock)
    closed: list[str] = []
    first._client = SimpleNamespace(close=lambda: closed.append("a"))  # type: ignore[attr-defined]
    models.get("anthropic:b", clock)
    models.get("anthropic:a", clock)  # a is the most recently used now
    models.get("anthropic:c", clock)  # b goes

    assert models.get("anthropic:a", clock) is first and closed == []
    models.get("anthropic:d", clock)  # c goes
    models.get("anthropic:e", clock)  # a goes, and its client is closed
    assert closed == ["a"]
    assert models.get("anthropic:a", clock) is not first


def test_a_scripted_model_is_made_for_each_run_on_its_clock() -> None:
    models = Models()
    clocks = SystemClock(), SystemClock()
    made = [models.get("", clock) for clock in clocks]

    assert made[0] is not made[1]
    assert [m.clock for m in made] == list(clocks)  # type: ignore[attr-defined]


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
def test_a_missing_sdk_is_a_config_error_naming_the_extra(
    monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    monkeypatch.setitem(sys.modules, kind, None)  # makes `import kind` raise ImportError
    with pytest.raises(ConfigError) as info:
        providers.make(kind, "m")
    assert str(info.value) == (
        f"model spec {kind}:m: the {kind} package is not installed (pip install 'dres[{kind}]')"
    )


@pytest.mark.parametrize("status", [429, 529])
@pytest.mark.parametrize("kind", ["anthropic", "openai"])
def test_a_rate_limit_is_never_retried_by_the_sdk_whatever_its_retry_after(
    server: FakeProvider, kind: str, status: int
) -> None:
    """With the SDK's retries on (2) and a Retry-After of an hour, the rate limit reaches dres at
    once, after one request: what it does is dres's decision (docs/semantics.md), not a sleep inside
    the chunk."""
    wait = (("retry-after", "3600"),)
    if kind == "anthropic":
        model: AnthropicModel | OpenAIModel = anthropic_model(server, max_retries=2)
        server.replies.append(anthropic_error(status, "rate_limit_error", wait))
    else:
        model = openai_model(server, max_retries=2)
        server.replies.append(openai_error(status, "rate_limit_exceeded", wait))

    error = failure(model, SIMPLE)

    assert error.code == "rate_limit"
    assert len(server.received) == 1
