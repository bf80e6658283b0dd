"""The approval webhook's delivery (docs/security.md, docs/semantics.md) against real HTTP
receivers on loopback: signed as Standard Webhooks specifies when DRES_APPROVAL_WEBHOOK_SECRET is
set (verified with the scheme's reference library), never redirected, and logged by its origin
only (a webhook's URL is often its credential)."""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest
from standardwebhooks import Webhook, WebhookVerificationError
from structlog.testing import capture_logs

from ledger.events import ApprovalRequested
from rigs.waiting import wait_until
from worker.base.errors import ConfigError
from worker.base.settings import load_settings
from worker.dev.redis_server import free_port
from worker.edges.webhook import approval_webhook

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
#: seconds a POST may take to arrive (it goes out on a thread of its own)
ARRIVES_S = 10


@dataclass
class Receiver:
    """An HTTP server on loopback that keeps each request and answers ``status`` (with
    ``location`` as its ``Location`` when given)."""

    status: int = 204
    location: str = ""
    got: queue.Queue[tuple[str, dict[str, str], bytes]] = field(default_factory=queue.Queue)
    server: HTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_port}"

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def _any(self) -> None:
                size = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(size)
                receiver.got.put((f"{self.command} {self.path}", dict(self.headers), body))
                self.send_response(receiver.status)
                if receiver.location:
                    self.send_header("Location", receiver.location)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_POST = do_GET = _any

            def log_message(self, *args: Any) -> None:
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


@pytest.fixture
def receivers() -> Iterator[list[Receiver]]:
    started: list[Receiver] = []
    yield started
    for receiver in started:
        receiver.stop()


def receiver(receivers: list[Receiver], **kw: Any) -> Receiver:
    started = Receiver(**kw).start()
    receivers.append(started)
    return started


def request(n: int) -> ApprovalRequested:
    return ApprovalRequested(
        event_id=f"ev_{n}",
        turn_id="turn_1",
        run_id="run_1",
        chunk=0,
        ts=time.time(),
        approval_id=f"apr_{n}",
        call_id=f"call_{n}",
        tool="send_email",
        input={"to": "ada@x.io", "body": f"hello {n}"},
        signature="ab" * 32,
        expires_at=time.time() + 60,
    )


def notify(url: str, *requests: ApprovalRequested, secret: str = "") -> None:
    webhook = approval_webhook(
        load_settings(approval_webhook=url, approval_webhook_secret=secret, public_url="")
    )
    assert webhook is not None
    webhook(list(requests))


def test_a_signed_webhook_verifies_with_the_standard_webhooks_library(
    receivers: list[Receiver],
) -> None:
    hook = receiver(receivers)
    before = int(time.time())
    notify(f"{hook.url}/hook?token=t", request(1), request(2), secret=SECRET)
    got = [hook.got.get(timeout=ARRIVES_S) for _ in range(2)]

    for n, (line, headers, body) in enumerate(got, start=1):
        assert line == "POST /hook?token=t"
        assert Webhook(SECRET).verify(body, headers) == json.loads(body)
        assert json.loads(body)["approval_id"] == headers["webhook-id"] == f"apr_{n}"
        assert json.loads(body)["input"] == {"to": "ada@x.io", "body": f"hello {n}"}
        assert before <= int(headers["webhook-timestamp"]) <= time.time()
        assert headers["webhook-signature"].startswith("v1,")
        with pytest.raises(WebhookVerificationError):
            Webhook("whsec_" + "A" * 32).verify(body, headers)
        with pytest.raises(WebhookVerificationError):
            Webhook(SECRET).verify(body.replace(b"hello", b"HELLO"), headers)


def test_without_a_secret_the_webhook_is_not_signed(receivers: list[Receiver]) -> None:
    hook = receiver(receivers)
    notify(f"{hook.url}/hook", request(1))
    _, headers, body = hook.got.get(timeout=ARRIVES_S)
    assert json.loads(body)["approval_id"] == "apr_1"
    assert not {"webhook-id", "webhook-signature"} & {k.lower() for k in headers}


def test_a_redirect_is_a_failure_and_the_place_it_names_gets_nothing(
    receivers: list[Receiver],
) -> None:
    elsewhere = receiver(receivers)
    hook = receiver(receivers, status=302, location=f"{elsewhere.url}/steal")
    with capture_logs() as logs:
        notify(f"{hook.url}/hook", request(1), secret=SECRET)
        assert hook.got.get(timeout=ARRIVES_S)[0] == "POST /hook"
        [failed] = wait_until(
            lambda: [e for e in logs if e["event"].startswith("approval webhook failed")],
            ARRIVES_S,
            "the failed POST logged",
        )
    assert failed["log_level"] == "warning" and failed["status"] == 302
    assert failed["url"] == hook.url
    assert elsewhere.got.empty()


def test_a_failed_webhook_logs_its_origin_only() -> None:
    """Nothing listens there: the log line names scheme, host and port, not the password,
    the secret path or the token."""
    port = free_port()
    url = f"http://hookuser:hookpass@127.0.0.1:{port}/secret-path/abc?token=tok123"
    with capture_logs() as logs:
        notify(url, request(1))
        [failed] = wait_until(
            lambda: [e for e in logs if e["event"] == "approval webhook failed"],
            ARRIVES_S,
            "the failed POST logged",
        )
    assert failed["url"] == f"http://127.0.0.1:{port}"
    text = json.dumps(logs, default=str)
    for secret in ("hookpass", "hookuser", "secret-path", "tok123", "hello"):
        assert secret not in text, secret


@pytest.mark.parametrize(
    ("url", "warned"),
    [
        ("http://hooks.example.com/x?token=t", True),
        ("http://10.1.2.3:8080/x", True),
        ("https://hooks.example.com/x", False),
        ("http://127.0.0.1:9/x", False),
        ("http://localhost/x", False),
        ("http://[::1]:9/x", False),
    ],
)
def test_a_plain_http_webhook_to_another_machine_is_warned_about_at_start(
    url: str, warned: bool
) -> None:
    with capture_logs() as logs:
        assert approval_webhook(load_settings(approval_webhook=url)) is not None
    warnings = [e for e in logs if e["log_level"] == "warning"]
    assert bool(warnings) == warned, logs
    for warning in warnings:
        assert "token" not in json.dumps(warning) and "/x" not in warning["url"]


@pytest.mark.parametrize("secret", ["not-a-secret", "whsec_", "whsec_***"])
def test_a_malformed_secret_is_refused_at_start_naming_the_variable(secret: str) -> None:
    with pytest.raises(ConfigError, match=r"^DRES_APPROVAL_WEBHOOK_SECRET: .*whsec_"):
        load_settings(approval_webhook_secret=secret)
