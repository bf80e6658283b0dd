"""A real OTLP/HTTP trace receiver on a free loopback port: what dres's processes export
(``ExportTraceServiceRequest``, protobuf), decoded with ``opentelemetry-proto`` into ``Span``s.

``otlp_receiver()`` yields it; ``url`` is its base URL, the value of
``OTEL_EXPORTER_OTLP_ENDPOINT`` (the exporter posts to ``/v1/traces``).
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Span:
    name: str
    trace_id: str
    span_id: str
    #: "" for a root
    parent_id: str
    attributes: dict[str, Any]
    events: tuple[tuple[str, dict[str, Any]], ...]
    #: 0 unset, 1 ok, 2 error
    status: int
    service: str
    #: the OTLP ``SpanKind``: 1 internal, 2 server, 3 client, 4 producer, 5 consumer
    kind: int = 0

    def event_names(self) -> list[str]:
        return [name for name, _ in self.events]


@dataclass
class Receiver:
    url: str = ""
    spans: list[Span] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def received(self) -> list[Span]:
        with self.lock:
            return list(self.spans)


def _value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


def _attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs}


def decode(body: bytes) -> list[Span]:
    """The spans of one ``ExportTraceServiceRequest``."""
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

    request: Any = trace_service_pb2.ExportTraceServiceRequest()
    request.ParseFromString(body)
    spans = []
    for resource_spans in request.resource_spans:
        service = str(_attributes(resource_spans.resource.attributes).get("service.name", ""))
        for scope_spans in resource_spans.scope_spans:
            for s in scope_spans.spans:
                events = tuple((e.name, _attributes(e.attributes)) for e in s.events)
                spans.append(
                    Span(
                        s.name,
                        s.trace_id.hex(),
                        s.span_id.hex(),
                        s.parent_span_id.hex(),
                        _attributes(s.attributes),
                        events,
                        s.status.code,
                        service,
                        s.kind,
                    )
                )
    return spans


class _Handler(BaseHTTPRequestHandler):
    server: ReceiverServer

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        spans = decode(body) if self.path == "/v1/traces" else []
        with self.server.receiver.lock:
            self.server.receiver.spans.extend(spans)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


class ReceiverServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.receiver = Receiver(f"http://127.0.0.1:{self.server_address[1]}")


@contextmanager
def otlp_receiver() -> Iterator[Receiver]:
    httpd = ReceiverServer()
    thread = threading.Thread(target=httpd.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield httpd.receiver
    finally:
        httpd.shutdown()
        httpd.server_close()
