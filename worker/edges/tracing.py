"""Traces of turns over OpenTelemetry (docs/tracing.md), configured by the standard ``OTEL_*``
variables alone.

Tracing is on when ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_ENDPOINT`` names
an endpoint (and ``OTEL_SDK_DISABLED`` is not ``true``); the SDK is imported then and only then,
and reads the rest itself (``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``,
``OTEL_TRACES_SAMPLER``, ``OTEL_BSP_*``, the exporter's headers and timeout). Spans follow the
GenAI semantic conventions; each process has its own provider, never the global one, so an
application that calls ``enqueue_turn`` keeps its own, and its current span parents the turn.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from types import MappingProxyType
from typing import Any

from ledger.events import TokenUsage
from worker.base.errors import ConfigError
from worker.base.tracing import OFF, ChatSpan, Settled, ToolSpan, Tracer, Value

#: either names where traces go; neither: tracing is off
ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
PROTOCOLS = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
#: ``true``: tool arguments and results go on their spans (the convention's opt-in)
CAPTURE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
#: characters of a captured argument or result kept on a span
CAPTURED_CHARS = 4096
#: the ``service.name`` of dres's spans unless the environment names one
SERVICE = "dres"

#: the attributes every span of the current run carries (``dres.turn_id``, ``dres.run_id``,
#: ``dres.chunk``): per greenlet or thread, as chunks share a process under gevent
_RUN: ContextVar[Mapping[str, Value]] = ContextVar(
    "dres_run_attributes", default=MappingProxyType({})
)


def from_environment(environ: Mapping[str, str] = os.environ) -> Tracer:
    """The process's tracer: OpenTelemetry's when an endpoint is named, else ``OFF``.
    A configuration dres cannot honour is a ``ConfigError`` naming the variable."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return OFF
    if not any(environ.get(name) for name in ENDPOINTS):
        return OFF
    for name in PROTOCOLS:
        protocol = environ.get(name)
        if protocol and protocol != "http/protobuf":
            raise ConfigError(f"{name}={protocol}: dres exports traces over http/protobuf only")
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as e:
        raise ConfigError(
            f"{ENDPOINTS[1]} (or {ENDPOINTS[0]}) is set but the OpenTelemetry SDK is not "
            "installed (pip install 'dres[otel]')"
        ) from e
    named = "OTEL_SERVICE_NAME" in environ or "service.name" in environ.get(
        "OTEL_RESOURCE_ATTRIBUTES", ""
    )
    provider = TracerProvider(resource=Resource.create({} if named else {"service.name": SERVICE}))
    try:
        exporter = OTLPSpanExporter()
    except ValueError as e:  # a malformed header or timeout variable
        raise ConfigError(f"OTEL_EXPORTER_OTLP_*: {e}") from e
    provider.add_span_processor(BatchSpanProcessor(exporter))
    capture = environ.get(CAPTURE, "").strip().lower() == "true"
    return OtelTracer(provider, capture=capture)


class OtelTracer:
    def __init__(self, provider: Any, *, capture: bool = False) -> None:
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.provider = provider
        self.capture = capture
        self._tracer = provider.get_tracer("dres")
        self._propagator = TraceContextTextMapPropagator()

    def turn(
        self, *, turn_id: str, conversation_id: str, mode: str, parent: str | None
    ) -> AbstractContextManager[str]:
        return self._turn(turn_id, conversation_id, mode, parent)

    @contextmanager
    def _turn(
        self, turn_id: str, conversation_id: str, mode: str, parent: str | None
    ) -> Iterator[str]:
        # No parent given: the caller's current span, if it has one (an instrumented app).
        context = self._propagator.extract({"traceparent": parent}) if parent else None
        attributes = {
            "dres.turn_id": turn_id,
            "dres.conversation_id": conversation_id,
            "dres.mode": mode,
        }
        with self._span("turn", attributes, context):
            carrier: dict[str, str] = {}
            self._propagator.inject(carrier)
            yield carrier.get("traceparent", "")

    def run(
        self, *, trace: str, turn_id: str, run_id: str, chunk: int, cause: str
    ) -> AbstractContextManager[None]:
        ids: dict[str, Value] = {
            "dres.turn_id": turn_id,
            "dres.run_id": run_id,
            "dres.chunk": chunk,
        }
        return self._run(trace, ids, cause)

    @contextmanager
    def _run(self, trace: str, ids: Mapping[str, Value], cause: str) -> Iterator[None]:
        from opentelemetry.context import Context

        # The turn's trace, whichever worker runs it; an untraced turn's runs are roots.
        context = self._propagator.extract({"traceparent": trace}) if trace else Context()
        token = _RUN.set(ids)
        try:
            with self._span("run", {**ids, "dres.cause": cause}, context):
                yield
        finally:
            _RUN.reset(token)

    def chat(self, model: str) -> AbstractContextManager[ChatSpan]:
        return self._chat(model)

    @contextmanager
    def _chat(self, model: str) -> Iterator[ChatSpan]:
        from opentelemetry.trace import SpanKind

        provider, _, name = model.partition(":")
        attributes = {
            **_RUN.get(),
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": name or model,
            "gen_ai.provider.name": provider,
        }
        # A call to a model served elsewhere: the GenAI conventions' inference spans are CLIENT.
        with self._span(f"chat {name or model}", attributes, kind=SpanKind.CLIENT) as span:
            yield _Chat(span)

    def tool(self, name: str) -> AbstractContextManager[ToolSpan]:
        return self._tool(name)

    @contextmanager
    def _tool(self, name: str) -> Iterator[ToolSpan]:
        attributes = {
            **_RUN.get(),
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.type": "function",
        }
        with self._span(f"execute_tool {name}", attributes) as span:
            yield _Tool(span, self.capture)

    def event(self, name: str, attributes: Mapping[str, Value]) -> None:
        from opentelemetry import trace

        trace.get_current_span().add_event(name, dict(attributes))

    @contextmanager
    def _span(
        self,
        name: str,
        attributes: Mapping[str, Value],
        context: Any = None,
        *,
        kind: Any = None,
    ) -> Iterator[Any]:
        """A span made current, ``INTERNAL`` unless ``kind`` says otherwise; whatever ends it
        early (an error, a time limit, Stop) ends it with an error status naming the exception."""
        from opentelemetry.trace import SpanKind, Status, StatusCode

        with self._tracer.start_as_current_span(
            name,
            context=context,
            kind=SpanKind.INTERNAL if kind is None else kind,
            attributes=dict(attributes),
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                yield span
            except BaseException as e:
                span.record_exception(e)
                span.set_attribute("error.type", getattr(e, "code", None) or type(e).__qualname__)
                span.set_status(Status(StatusCode.ERROR, f"{type(e).__name__}: {e}"[:200]))
                raise


class _Chat:
    def __init__(self, span: Any) -> None:
        self.span = span

    def answered(self, usage: TokenUsage | None, finish_reason: str) -> None:
        if usage is not None:
            self.span.set_attribute("gen_ai.usage.input_tokens", usage.input_tokens)
            self.span.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)
        self.span.set_attribute("gen_ai.response.finish_reasons", [finish_reason])


class _Tool:
    def __init__(self, span: Any, capture: bool) -> None:
        self.span = span
        self.capture = capture

    def settled(self, call: Settled) -> None:
        from opentelemetry.trace import Status, StatusCode

        span = self.span
        span.set_attribute("gen_ai.tool.call.id", call.call_id)
        if call.read_only is not None:
            span.set_attribute("dres.tool.read_only", call.read_only)
        if call.blocked_reason is not None:
            span.set_attribute("dres.tool.blocked_reason", call.blocked_reason)
        elif call.is_error:
            span.set_attribute("error.type", "tool_error")
            span.set_status(Status(StatusCode.ERROR, "the tool's result is an error"))
        if self.capture:
            span.set_attribute("gen_ai.tool.call.arguments", _shown(call.arguments))
            span.set_attribute("gen_ai.tool.call.result", _shown(call.result))


def _shown(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=repr, ensure_ascii=False)
    return text[:CAPTURED_CHARS]
