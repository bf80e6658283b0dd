"""The approval webhook (``DRES_APPROVAL_WEBHOOK``, docs/semantics.md, docs/security.md): each
approval request a run ends waiting on is POSTed there as JSON, so a person is told.

The lifecycle only says that requests were made (``worker.lifecycle.base.NotifyApprovals``); the
protocol is this module's: the body (the request's fields, the turn's URL and the URL a decision
is posted to, from ``DRES_PUBLIC_URL``), the POST, its timeout, its signature. Best-effort: the
POSTs go out on a thread of their own, so the run that waits ends at once, and a failed one is
logged, never retried: the request stands in the ledger and the lists all the same.

With ``DRES_APPROVAL_WEBHOOK_SECRET`` (``whsec_…``) every POST is signed as Standard Webhooks
specifies (``webhook-id``: the approval id, ``webhook-timestamp``, ``webhook-signature``), so
the receiver can tell dres's requests from anyone else's. A redirect is never followed (a 3xx is
a failure): the body carries the tool's input, and only the configured URL may receive it. A
webhook's URL is often its only credential (a secret path, a ``?token=``), so a log line names
only its scheme, host and port.
"""

from __future__ import annotations

import ipaddress
import json
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import httpx
import structlog
from standardwebhooks import Webhook

from ledger.approvals import request_fields
from ledger.events import ApprovalRequested
from worker.base.masking import mask_text
from worker.base.settings import Settings
from worker.lifecycle.base import NotifyApprovals

log = structlog.get_logger("dres.approvals")

#: seconds a webhook POST may take
WEBHOOK_TIMEOUT_S = 5.0
#: host names that are this machine whatever DNS says
LOOPBACK_NAMES = frozenset({"localhost"})

#: a plain-HTTP webhook to another machine was warned about in this process
_warned: set[str] = set()


def origin(url: str) -> str:
    """``scheme://host:port`` of ``url``: what a log line may say of where it points."""
    parts = urlsplit(url)
    try:
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:  # a port that is not a number: say nothing of it
        port = None
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{host}:{port}" if port else f"{parts.scheme}://{host}"


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class ApprovalWebhook:
    """POSTs each request of a wait to ``url``, one after another, on a thread of their own."""

    def __init__(self, url: str, public_url: str, secret: str = "") -> None:
        self.url = url
        # the body's URLs tell a person where to look: never the API's own credentials
        parts = urlsplit(public_url.rstrip("/"))
        self.base = parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()
        self.signer = Webhook(secret) if secret else None

    def __call__(self, requests: Sequence[ApprovalRequested]) -> None:
        posts = [(r.approval_id, json.dumps(self.body(r)).encode()) for r in requests]
        threading.Thread(
            target=self._post_all, args=(posts,), name="dres-approval-webhook", daemon=True
        ).start()

    def body(self, request: ApprovalRequested) -> dict[str, Any]:
        path = f"/v1/turns/{request.turn_id}"
        return {
            **request_fields(request),
            "turn_url": self.base + path,
            "decide_url": f"{self.base}{path}/approvals/{request.approval_id}",
        }

    def headers(self, message_id: str, data: bytes) -> dict[str, str]:
        """The POST's headers: JSON, and the Standard Webhooks signature when a secret is set
        (the message id is the approval id: one request, one message)."""
        headers = {"Content-Type": "application/json"}
        if self.signer is not None:
            now = datetime.now(UTC)
            headers["webhook-id"] = message_id
            headers["webhook-timestamp"] = str(int(now.timestamp()))
            headers["webhook-signature"] = self.signer.sign(message_id, now, data)
        return headers

    def _post_all(self, posts: list[tuple[str, bytes]]) -> None:
        # follow_redirects=False (httpx's default, said here because it matters): a 3xx is a
        # failure, and the body goes nowhere else
        with httpx.Client(timeout=WEBHOOK_TIMEOUT_S, follow_redirects=False) as client:
            for message_id, data in posts:
                self._post(client, message_id, data)

    def _post(self, client: httpx.Client, message_id: str, data: bytes) -> None:
        where = origin(self.url)
        try:
            answer = client.post(self.url, content=data, headers=self.headers(message_id, data))
        except Exception as e:  # best-effort: the request stands in the ledger and the lists
            # the URL as httpx spells it may differ from the setting's: every URL in it masked
            error = mask_text(f"{type(e).__name__}: {e}".replace(self.url, where), path=True)
            log.warning("approval webhook failed", url=where, error=error)
            return
        if answer.is_redirect:
            log.warning(
                "approval webhook failed: redirects are not followed",
                url=where,
                status=answer.status_code,
            )
        elif not answer.is_success:
            log.warning("approval webhook failed", url=where, status=answer.status_code)


def approval_webhook(settings: Settings) -> NotifyApprovals | None:
    """The webhook ``settings`` ask for; None when ``DRES_APPROVAL_WEBHOOK`` is unset. A
    plain-HTTP URL to another machine is warned about once per process: the body carries the
    tool's input, readable on the way."""
    url = settings.approval_webhook
    if not url:
        return None
    parts = urlsplit(url)
    if parts.scheme == "http" and not is_loopback(parts.hostname or "") and url not in _warned:
        _warned.add(url)
        log.warning(
            "DRES_APPROVAL_WEBHOOK is plain http:// to another machine: approval requests "
            "(with the tool's input) travel unencrypted; use https://",
            url=origin(url),
        )
    return ApprovalWebhook(url, settings.public_url, settings.approval_webhook_secret)
