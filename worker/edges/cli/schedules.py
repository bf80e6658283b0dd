"""``dres schedule add|list|rm`` (docs/commands.md): schedules of turns, made, listed and deleted
in-process through the lifecycle as the API's ``/v1/schedules`` does. Bad input (a malformed
``--every``, a naive ``--at``): one line, exit 2, as everywhere."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from worker.edges.runtime import Runtime


def add_parser(
    sub: argparse._SubParsersAction[Any],
    an_id: Callable[[str], str],
    a_tenant: Callable[[str], str],
) -> None:
    schedule = sub.add_parser("schedule", help="schedules of turns: add, list, rm")
    verbs = schedule.add_subparsers(dest="verb", required=True)
    add = verbs.add_parser("add", help="a schedule; prints its schedule_id and next_at")
    add.add_argument("message")
    when = add.add_mutually_exclusive_group(required=True)
    when.add_argument("--at", metavar="ISO", help="once, at this ISO 8601 time with an offset")
    when.add_argument(
        "--every", metavar="SPEC", help="every so many seconds, or a five-field cron in UTC"
    )
    add.add_argument("--conversation", default=None, type=an_id)
    add.add_argument("--tenant", default=None, type=a_tenant)
    add.add_argument(
        "--catch-up",
        choices=("one", "none"),
        default="one",
        help="ticks missed while no worker ran: fire the newest once, or none (default one)",
    )
    add.add_argument("--model", default=None, help="scripted:PATH, anthropic:MODEL, openai:MODEL")
    listing = verbs.add_parser("list", help="schedules, newest first")
    listing.add_argument("--json", action="store_true")
    listing.add_argument("--limit", type=int, default=50)
    rm = verbs.add_parser("rm", help="delete a schedule")
    rm.add_argument("schedule_id", type=an_id)


def run(rt: Runtime, args: argparse.Namespace) -> int:
    """One ``dres schedule`` verb; an unknown schedule to ``rm`` is bad input (exit 2)."""
    from worker.base.errors import InvalidInput
    from worker.edges.http.schedules import iso, schedule_out

    lifecycle = rt.lifecycle
    if args.verb == "add":
        made = lifecycle.add_schedule(
            args.message,
            at=args.at,
            every=args.every,
            conversation_id=args.conversation,
            model=args.model,
            tenant=args.tenant,
            catch_up=args.catch_up,
        )
        print(f"{made.schedule_id} {iso(made.next_ms) or '-'}")
        return 0
    if args.verb == "rm":
        if not lifecycle.remove_schedule(args.schedule_id):
            raise InvalidInput(f"unknown schedule {args.schedule_id!r}")
        print(f"deleted {args.schedule_id}")
        return 0
    found, _ = lifecycle.schedules(limit=args.limit)
    rows = [schedule_out(s).model_dump(mode="json") for s in found]
    if args.json:
        print(json.dumps(rows, indent=2, ensure_ascii=False))
        return 0
    if not rows:
        print("(no schedules)")
        return 0
    print(f"{'schedule_id':<40} {'when':<20} {'next_at':<26} message")
    for row in rows:
        when = f"at {row['at']}" if row["at"] else f"every {row['every']}"
        print(
            f"{row['schedule_id']:<40} {when:<20} {row['next_at'] or '-':<26} {row['message'][:60]}"
        )
    return 0
