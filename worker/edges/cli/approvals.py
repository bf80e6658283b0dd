"""``dres approvals``, ``dres approve`` and ``dres deny`` (docs/commands.md): the requests waiting,
and a person's decision on one, taken in-process through the lifecycle as the API takes it.

With DRES_APPROVER_TOKENS set a decision needs an approver's token (``--token``), as it does over
HTTP, and records that approver's name as ``by``. Whoever runs the command reaches the ledger's
Redis and could write it directly: the token makes the record say who decided, it is no lock.
"""

from __future__ import annotations

import argparse
import json

from worker.base.errors import InvalidInput
from worker.base.settings import Settings
from worker.edges.runtime import Runtime
from worker.lifecycle.approvals import Decided


def list_approvals(rt: Runtime, args: argparse.Namespace) -> int:
    from ledger.approvals import request_fields

    found, _ = rt.lifecycle.store.approvals.page(limit=args.limit)
    if args.json:
        print(json.dumps([request_fields(r) for r in found], indent=2, ensure_ascii=False))
        return 0
    if not found:
        print("(no approval requests waiting)")
        return 0
    print(f"{'turn_id':<28} {'approval_id':<28} {'tool':<16} input")
    for request in found:
        shown = json.dumps(request.input, ensure_ascii=False)
        print(f"{request.turn_id:<28} {request.approval_id:<28} {request.tool:<16} {shown[:80]}")
    return 0


def decider(settings: Settings, token: str | None, by: str | None) -> str:
    """Who decides: with DRES_APPROVER_TOKENS set, the approver whose ``--token`` this is (a
    ``--by`` naming anyone else is refused); else ``--by``, or ``cli``."""
    if not settings.approvers:
        if token is not None:
            raise InvalidInput("--token is for DRES_APPROVER_TOKENS, which is not set")
        return by or "cli"
    if not token:
        raise InvalidInput("DRES_APPROVER_TOKENS is set: --token TOKEN (an approver's) is required")
    name = settings.approver_named(token)
    if name is None:
        raise InvalidInput("--token is not an approver's token (DRES_APPROVER_TOKENS)")
    if by not in (None, name):
        raise InvalidInput(f"--by: the token is the approver {name!r}'s: give that name or none")
    return name


def decide(rt: Runtime, args: argparse.Namespace, by: str) -> Decided:
    """``dres approve`` / ``dres deny`` of ``args`` by ``by``, through the lifecycle."""
    signature = args.signature
    if signature is None:
        # the request's own: an approval id names one call's input, which never changes
        known = rt.lifecycle.store.meta(args.turn_id).approval(args.approval_id)
        signature = known[1] if known is not None else ""
    decision = "approve" if args.command == "approve" else "deny"
    return rt.lifecycle.decide(
        args.turn_id, args.approval_id, decision, signature, reason=args.reason or "", by=by
    )
