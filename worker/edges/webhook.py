"""The approval webhook (``DRES_APPROVAL_WEBHOOK``, docs/semantics.md): each approval request a run
ends waiting on is POSTed there as JSON, so a person is told.

The lifecycle only says that requests were made (``worker.lifecycle.base.NotifyApprovals``); the
protocol is this module's: the body (the request's fields, the turn's URL and the URL a decision
is posted to, from ``DRES_PUBLIC_URL``), the POST, its timeout. Best-effort: the POSTs go out on
a thread of their own, so the run that waits ends at once, and a failed one is logged, never
retried: the request stands in the ledger and the lists all the same.
"""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Sequence
from typing import Any

import structlog

from ledger.approvals import request_fields
from ledger.events import ApprovalRequested
from worker.base.settings import Settings
from worker.lifecycle.base import NotifyApprovals

log = structlog.get_logger("dres.approvals")

#: seconds a webhook POST may take
WEBHOOK_TIMEOUT_S = 5.0


class ApprovalWebhook:
    """POSTs each request of a wait to ``url``, one after another, on a thread of their own."""

    def __init__(self, url: str, public_url: str) -> None:
        self.url = url
        self.base = public_url.rstrip("/")

    def __call__(self, requests: Sequence[ApprovalRequested]) -> None:
        bodies = [self.body(r) for r in requests]
        threading.Thread(
            target=_post_all, args=(self.url, bodies), name="dres-approval-webhook", daemon=True
        ).start()

    def body(self, request: ApprovalRequested) -> dict[str, Any]:
        path = f"/v1/turns/{request.turn_id}"
        return {
            **request_fields(request),
            "turn_url": self.base + path,
            "decide_url": f"{self.base}{path}/approvals/{request.approval_id}",
        }


def approval_webhook(settings: Settings) -> NotifyApprovals | None:
    """The webhook ``settings`` ask for; None when ``DRES_APPROVAL_WEBHOOK`` is unset."""
    if not settings.approval_webhook:
        return None
    return ApprovalWebhook(settings.approval_webhook, settings.public_url)


def _post_all(url: str, bodies: list[dict[str, Any]]) -> None:
    for body in bodies:
        data = json.dumps(body).encode()
        request = urllib.request.Request(
            url, data=data, headers={"Content-Type": "application/json"}, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=WEBHOOK_TIMEOUT_S) as answer:
                answer.read()
        except Exception as e:  # best-effort: the request stands in the ledger and the lists
            log.warning("approval webhook failed", url=url, error=repr(e))
