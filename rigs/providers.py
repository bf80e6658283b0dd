"""A fake model provider: a local HTTP server that speaks the Anthropic Messages and the OpenAI
chat-completions streaming formats, so the official SDKs run for real against it (no mock of an
SDK, no network).

Each request takes the next scripted ``Reply`` (``FakeProvider.replies``, first in first out),
so a run sees e.g. "first request 502, second OK"; every request's path and JSON body is
recorded (``FakeProvider.received``). A request with no reply left goes to the provider's
``responder`` when it has one (``tool_then_text``: an answer chosen by the request's body, for
benchmarks' thousands of requests), else gets a 400 naming that, a non-resumable error, so a test
that under-scripts fails loudly instead of looping. A ``Reply``
can also hang before sending any byte, stall mid-stream, or cut its socket mid-stream.

``Dialect`` builds one provider's replies (text, a tool call, an HTTP error) and the environment
that points its SDK at the server (``ANTHROPIC_BASE_URL`` / ``OPENAI_BASE_URL`` and a dummy key),
so a test runs the same scenario on both. ``Blackhole`` is an address whose TCP connect never
completes (a full accept queue): the client blocks in connect.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

#: seconds a hanging or stalled reply waits at most for the test to release it
HANG_S = 120.0
#: bytes a cut or stalled reply promises beyond those it sends
MISSING = 64
#: tells both SDKs not to retry an error reply on their own (their ``x-should-retry`` header)
NO_RETRY = (("x-should-retry", "false"),)

Headers = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Reply:
    """One scripted answer to one request."""

    status: int = 200
    body: bytes = b""
    content_type: str = "text/event-stream"
    headers: Headers = ()
    #: send the body, promising more, then close the socket (a stream cut mid-way)
    cut: bool = False
    #: read the request and never answer, not even a status line (until released)
    hang: bool = False
    #: send the status, headers and body, promising more, then wait (a stream stalled mid-way)
    stall: bool = False


@dataclass(frozen=True)
class Received:
    path: str
    body: dict[str, Any]
    headers: dict[str, str]
    #: ``time.time()`` when the request's body had been read
    at: float


#: what answers a request from its body alone (``FakeProvider.responder``)
Responder = Callable[[Received], Reply]


@dataclass
class FakeProvider:
    """What a test scripts and reads; ``url`` is the server's base URL (no path)."""

    url: str = ""
    replies: list[Reply] = field(default_factory=list)
    received: list[Received] = field(default_factory=list)
    #: set at the end of the test: hanging and stalled replies return
    released: threading.Event = field(default_factory=threading.Event)
    changed: threading.Condition = field(default_factory=threading.Condition)
    #: answers a request when no scripted reply is left (None: a 400 naming that)
    responder: Responder | None = None

    def script(self, *replies: Reply) -> FakeProvider:
        with self.changed:
            self.replies.extend(replies)
        return self

    def wait_requests(self, count: int, timeout: float = 15.0) -> list[Received]:
        """The requests received, once there are at least ``count``; fails after ``timeout``."""
        with self.changed:
            if not self.changed.wait_for(lambda: len(self.received) >= count, timeout):
                raise AssertionError(
                    f"the fake provider: {len(self.received)} requests, not {count}, "
                    f"within {timeout} s"
                )
            return list(self.received)

    def take(self, received: Received) -> Reply:
        with self.changed:
            self.received.append(received)
            number = len(self.received)
            self.changed.notify_all()
            if self.replies:
                return self.replies.pop(0)
        if self.responder is not None:
            return self.responder(received)
        body = {
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "message": f"fake provider: no reply scripted for request {number}",
            },
        }
        return Reply(400, json.dumps(body).encode(), "application/json", NO_RETRY)


class _Handler(BaseHTTPRequestHandler):
    server: ProviderServer

    def do_POST(self) -> None:
        fake = self.server.fake
        length = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(length)
        headers = {k.lower(): v for k, v in self.headers.items()}
        reply = fake.take(Received(self.path, json.loads(raw or b"{}"), headers, time.time()))
        self.close_connection = True
        if reply.hang:
            fake.released.wait(HANG_S)
            return
        self.send_response(reply.status)
        self.send_header("Content-Type", reply.content_type)
        promised = len(reply.body) + (MISSING if reply.cut or reply.stall else 0)
        self.send_header("Content-Length", str(promised))
        for name, value in reply.headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(reply.body)
        self.wfile.flush()
        if reply.stall:
            fake.released.wait(HANG_S)
        # A cut reply ends here: the connection closes with the promised bytes missing.

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the tests assert on what was received, not on the access log."""


class ProviderServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.fake = FakeProvider(f"http://127.0.0.1:{self.server_address[1]}")


@contextlib.contextmanager
def fake_provider() -> Iterator[FakeProvider]:
    """A running fake provider on a free loopback port; hanging replies are released at exit."""
    httpd = ProviderServer()
    thread = threading.Thread(target=httpd.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield httpd.fake
    finally:
        httpd.fake.released.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(10)


@contextlib.contextmanager
def blackhole() -> Iterator[str]:
    """A base URL whose TCP connect never completes: a listener with a backlog of zero that
    never accepts, its queue filled first, so the kernel drops further handshakes."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    address = listener.getsockname()
    fillers: list[socket.socket] = []
    try:
        for _ in range(8):
            filler = socket.socket()
            filler.settimeout(0.3)
            fillers.append(filler)
            try:
                filler.connect(address)
            except TimeoutError:
                break
        else:
            raise RuntimeError("could not fill the accept queue of a blackhole listener")
        yield f"http://{address[0]}:{address[1]}"
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


# -- the wire formats ------------------------------------------------------------------------


def sse(events: list[dict[str, Any]], *, named: bool = True) -> bytes:
    """Server-Sent Events: Anthropic names each event by its type; OpenAI sends data only."""
    lines = []
    for event in events:
        name = f"event: {event['type']}\n" if named else ""
        lines.append(f"{name}data: {json.dumps(event)}\n\n")
    return "".join(lines).encode()


def anthropic_stream(*blocks: list[dict[str, Any]], stop: bool = True) -> bytes:
    message: dict[str, Any] = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 3, "output_tokens": 1},
    }
    events: list[dict[str, Any]] = [{"type": "message_start", "message": message}]
    for block in blocks:
        events += block
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": 9},
        }
    )
    if stop:
        events.append({"type": "message_stop"})
    return sse(events)


def text_block(index: int, *parts: str) -> list[dict[str, Any]]:
    return [
        {
            "type": "content_block_start",
            "index": index,
            "content_block": {"type": "text", "text": ""},
        },
        *(
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "text_delta", "text": p},
            }
            for p in parts
        ),
        {"type": "content_block_stop", "index": index},
    ]


def tool_block(index: int, call_id: str, name: str, *parts: str) -> list[dict[str, Any]]:
    start = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
    return [
        {"type": "content_block_start", "index": index, "content_block": start},
        *(
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "input_json_delta", "partial_json": p},
            }
            for p in parts
        ),
        {"type": "content_block_stop", "index": index},
    ]


def anthropic_error(status: int, kind: str, headers: Headers = ()) -> Reply:
    body = {"type": "error", "error": {"type": kind, "message": f"{kind} (fake)"}}
    return Reply(status, json.dumps(body).encode(), "application/json", headers)


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "gpt-test",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def usage_chunk(prompt_tokens: int = 3, completion_tokens: int = 9) -> dict[str, Any]:
    """The last chunk of a stream asked for its usage (``include_usage``): no choices."""
    usage = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    return {**chunk({}), "choices": [], "usage": usage}


def openai_stream(*chunks: dict[str, Any], done: bool = True) -> bytes:
    body = b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks)
    return body + (b"data: [DONE]\n\n" if done else b"")


def tool_delta(
    index: int, *, call_id: str | None = None, name: str | None = None, args: str = ""
) -> dict[str, Any]:
    function: dict[str, Any] = {"arguments": args}
    if name:
        function["name"] = name
    part: dict[str, Any] = {"index": index, "function": function}
    if call_id:
        part.update(id=call_id, type="function")
    return {"tool_calls": [part]}


def openai_error(status: int, kind: str, headers: Headers = ()) -> Reply:
    body = {"error": {"message": f"{kind} (fake)", "type": kind, "code": None, "param": None}}
    return Reply(status, json.dumps(body).encode(), "application/json", headers)


# -- one scenario, either provider ---------------------------------------------------------------


class Dialect:
    """One provider's replies and SDK environment, for scenarios run on both."""

    #: the spec prefix (``anthropic`` / ``openai``), also the SDK's import name
    kind: ClassVar[str]
    #: the request path the SDK posts to
    path: ClassVar[str]
    #: HTTP status -> the error type the provider sends with it
    ERROR_TYPES: ClassVar[Mapping[int, str]]
    #: (input, output) tokens every complete reply reports as spent
    USAGE: ClassVar[tuple[int, int]] = (3, 9)

    def text(self, *parts: str, complete: bool = True) -> Reply:
        raise NotImplementedError

    def tool_call(self, call_id: str, name: str, arguments: dict[str, Any]) -> Reply:
        raise NotImplementedError

    def error(self, status: int, headers: Headers = NO_RETRY) -> Reply:
        raise NotImplementedError

    def env(self, url: str, key: str = "fake-key") -> dict[str, str]:
        """The environment variables that point the SDK at ``url``."""
        raise NotImplementedError

    def cut(self, *parts: str) -> Reply:
        """A 200 stream that sends ``parts`` and then loses its connection."""
        return Reply(body=self.text(*parts, complete=False).body, cut=True)

    def stalled(self, *parts: str) -> Reply:
        """A 200 stream that sends ``parts`` and then nothing more."""
        return Reply(body=self.text(*parts, complete=False).body, stall=True)

    def __repr__(self) -> str:
        return self.kind


class AnthropicDialect(Dialect):
    kind = "anthropic"
    path = "/v1/messages"
    ERROR_TYPES: ClassVar[Mapping[int, str]] = {
        400: "invalid_request_error",
        401: "authentication_error",
        429: "rate_limit_error",
        529: "overloaded_error",
    }

    def text(self, *parts: str, complete: bool = True) -> Reply:
        return Reply(body=anthropic_stream(text_block(0, *parts), stop=complete))

    def tool_call(self, call_id: str, name: str, arguments: dict[str, Any]) -> Reply:
        return Reply(body=anthropic_stream(tool_block(0, call_id, name, json.dumps(arguments))))

    def error(self, status: int, headers: Headers = NO_RETRY) -> Reply:
        return anthropic_error(status, self.ERROR_TYPES.get(status, "api_error"), headers)

    def env(self, url: str, key: str = "fake-key") -> dict[str, str]:
        return {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": key}


class OpenAIDialect(Dialect):
    kind = "openai"
    path = "/v1/chat/completions"
    ERROR_TYPES: ClassVar[Mapping[int, str]] = {
        400: "invalid_request_error",
        401: "invalid_api_key",
        429: "rate_limit",
    }

    def text(self, *parts: str, complete: bool = True) -> Reply:
        chunks = [chunk({"content": p}) for p in parts]
        if complete:
            chunks += [chunk({}, finish="stop"), usage_chunk(*self.USAGE)]
        return Reply(body=openai_stream(*chunks, done=complete))

    def tool_call(self, call_id: str, name: str, arguments: dict[str, Any]) -> Reply:
        start = tool_delta(0, call_id=call_id, name=name, args=json.dumps(arguments))
        finish = chunk({}, finish="tool_calls")
        return Reply(body=openai_stream(chunk(start), finish, usage_chunk(*self.USAGE)))

    def error(self, status: int, headers: Headers = NO_RETRY) -> Reply:
        return openai_error(status, self.ERROR_TYPES.get(status, "server_error"), headers)

    def env(self, url: str, key: str = "fake-key") -> dict[str, str]:
        return {"OPENAI_BASE_URL": f"{url}/v1", "OPENAI_API_KEY": key}


DIALECTS: tuple[Dialect, ...] = (AnthropicDialect(), OpenAIDialect())


def openai_completion(message: dict[str, Any], finish: str) -> Reply:
    """A whole (not streamed) chat completion: the answer to a request without ``stream``."""
    prompt, completion = OpenAIDialect.USAGE
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "gpt-test",
        "choices": [
            {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }
    return Reply(body=json.dumps(body).encode(), content_type="application/json")


def tool_then_text(
    name: str, arguments: dict[str, Any], text: str, calls: Callable[[str], int] | None = None
) -> Responder:
    """An OpenAI chat-completions responder for any number of one-call conversations: a request
    that carries no tool result (no ``tool`` message) gets a call of ``name`` with
    ``arguments``, one that does gets ``text``; streamed when the request asks for a stream,
    else one JSON completion. No script to run out of: a benchmark's thousands of turns."""
    openai = OpenAIDialect()
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }
    replies = {
        (False, True): openai.tool_call("call_1", name, arguments),
        (True, True): openai.text(text),
        (False, False): openai_completion({"content": None, "tool_calls": [call]}, "tool_calls"),
        (True, False): openai_completion({"content": text}, "stop"),
    }

    def respond(received: Received) -> Reply:
        messages = [m for m in received.body.get("messages") or () if isinstance(m, dict)]
        stream = bool(received.body.get("stream"))
        if calls is None:
            answered = any(m.get("role") == "tool" for m in messages)
            return replies[answered, stream]
        asked = next((m.get("content") for m in messages if m.get("role") == "user"), "")
        made = sum(1 for m in messages if m.get("role") == "tool")
        if made >= calls(str(asked)):
            return replies[True, stream]
        args = {**arguments, "n": made + 1}
        if stream:
            return openai.tool_call(f"call_{made + 1}", name, args)
        many = {**call, "id": f"call_{made + 1}"}
        many["function"] = {"name": name, "arguments": json.dumps(args)}
        return openai_completion({"content": None, "tool_calls": [many]}, "tool_calls")

    return respond
