"""Tracing is configured by the standard OTEL_* variables alone, and is off and free without an
endpoint (docs/tracing.md)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from rigs import ROOT
from worker.base.errors import ConfigError, ModelError
from worker.base.tracing import OFF, Settled
from worker.edges.tracing import OtelTracer, from_environment

ENDPOINT = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}


def test_without_an_endpoint_tracing_is_off() -> None:
    assert from_environment({}) is OFF
    assert from_environment({"OTEL_SERVICE_NAME": "x"}) is OFF


def test_the_sdk_disabled_turns_it_off_even_with_an_endpoint() -> None:
    assert from_environment({**ENDPOINT, "OTEL_SDK_DISABLED": "true"}) is OFF


def test_an_endpoint_turns_it_on() -> None:
    traces_only = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}
    assert isinstance(from_environment(traces_only), OtelTracer)


@pytest.mark.parametrize(
    "name", ["OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"]
)
def test_a_protocol_other_than_http_protobuf_fails_naming_the_variable(name: str) -> None:
    with pytest.raises(ConfigError, match=f"^{name}=grpc"):
        from_environment({**ENDPOINT, name: "grpc"})


def test_off_a_worker_process_never_imports_the_sdks_tracing_or_exporter() -> None:
    """A runtime's tracer, a turn recorded, a run, a model and a tool call: no import of the
    SDK's tracing or of the exporter (redis-py imports ``opentelemetry.sdk`` itself, for its
    metrics, whenever the SDK is installed)."""
    code = """
import sys
from worker.base.settings import load_settings
from worker.edges.runtime import Runtime
from worker.base.tracing import Settled
rt = Runtime.from_settings(load_settings())
tracer = rt.tracer
with tracer.turn(turn_id="t", conversation_id="c", mode="foreground", parent=None) as trace:
    assert trace == ""
with tracer.run(trace="", turn_id="t", run_id="r", chunk=0, cause="first"):
    with tracer.chat("scripted:x") as chat:
        chat.answered(None, "stop")
    with tracer.tool("send_email") as span:
        span.settled(Settled(call_id="c", read_only=False, is_error=False, blocked_reason=None))
prefixes = ("opentelemetry.sdk.trace", "opentelemetry.exporter")
print(sorted(m for m in sys.modules if m.startswith(prefixes)))
"""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def recording(capture: bool) -> tuple[OtelTracer, Any]:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return OtelTracer(provider, capture=capture), exporter


@pytest.mark.parametrize("capture", [False, True])
def test_tool_content_goes_on_a_span_only_when_capture_is_asked_for(capture: bool) -> None:
    tracer, exporter = recording(capture)
    arguments = {"to": "a@x.io", "body": "secret"}
    with (
        tracer.run(trace="", turn_id="t", run_id="r", chunk=2, cause="first"),
        tracer.tool("send_email") as span,
    ):
        span.settled(
            Settled(
                call_id="call_1",
                read_only=False,
                is_error=False,
                blocked_reason=None,
                arguments=arguments,
                result={"sent": True},
            )
        )
    [tool] = [s for s in exporter.get_finished_spans() if s.name == "execute_tool send_email"]
    attributes = dict(tool.attributes or {})
    assert attributes["dres.chunk"] == 2 and attributes["gen_ai.tool.call.id"] == "call_1"
    if capture:
        assert attributes["gen_ai.tool.call.arguments"] == '{"to": "a@x.io", "body": "secret"}'
        assert attributes["gen_ai.tool.call.result"] == '{"sent": true}'
    else:
        assert not any("secret" in str(v) for v in attributes.values())
        assert "gen_ai.tool.call.arguments" not in attributes


def test_a_model_call_cut_short_still_ends_its_span_with_an_error_status() -> None:
    from opentelemetry.trace import StatusCode

    tracer, exporter = recording(False)
    with (
        pytest.raises(ModelError),
        tracer.run(trace="", turn_id="t", run_id="r", chunk=0, cause="first"),
        tracer.chat("anthropic:claude-x"),
    ):
        raise ModelError("gateway_timeout", "upstream gateway timed out")
    [chat] = [s for s in exporter.get_finished_spans() if s.name == "chat claude-x"]
    assert chat.status.status_code == StatusCode.ERROR
    assert dict(chat.attributes or {})["error.type"] == "gateway_timeout"
    assert dict(chat.attributes or {})["gen_ai.provider.name"] == "anthropic"


def test_a_model_call_is_a_client_span_and_every_other_span_is_internal() -> None:
    """The GenAI conventions' inference spans are ``CLIENT``; a tool call, a run and the turn's
    record are work in dres's own process (``INTERNAL``)."""
    from opentelemetry.trace import SpanKind

    tracer, exporter = recording(False)
    with tracer.turn(turn_id="t", conversation_id="c", mode="foreground", parent=None) as trace:
        pass
    with tracer.run(trace=trace, turn_id="t", run_id="r", chunk=0, cause="first"):
        with tracer.chat("openai:gpt-x") as chat:
            chat.answered(None, "tool_calls")
        with tracer.tool("send_email") as span:
            span.settled(Settled(call_id="c", read_only=False, is_error=False, blocked_reason=None))
    kinds = {s.name: s.kind for s in exporter.get_finished_spans()}
    assert kinds == {
        "turn": SpanKind.INTERNAL,
        "run": SpanKind.INTERNAL,
        "chat gpt-x": SpanKind.CLIENT,
        "execute_tool send_email": SpanKind.INTERNAL,
    }
