"""The ``dres`` command (docs/commands.md). Bad input or an unreachable Redis: one line, exit 2."""

from __future__ import annotations

import argparse
import ipaddress
import json
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NoReturn

import kombu.exceptions
import redis

from ledger.errors import DresBaseError, LedgerUnavailable
from worker.base.errors import ConfigError
from worker.edges.cli.schedules import add_parser as add_schedule_parser

if TYPE_CHECKING:
    from worker.edges.runtime import Runtime
    from worker.lifecycle.approvals import DecidedKind

#: exit status for bad input, bad configuration or an unreachable Redis
USAGE_ERROR = 2
#: exit status when Continue or Stop is refused
REFUSED = 1


def _fail(message: str) -> int:
    print(f"dres: {message}", file=sys.stderr)
    return USAGE_ERROR


def _broker_name() -> str:
    """The broker as the API names it (``the broker (host:port)``), without its credentials."""
    from worker.base.settings import load_settings
    from worker.edges.http.faults import broker_name

    return broker_name(load_settings())


def _ledger_name() -> str:
    """The ledger's Redis as a person set it (DRES_REDIS_URL), its secrets masked."""
    from worker.base.masking import mask_url
    from worker.base.settings import load_settings

    return mask_url(load_settings().redis_url)


def _runtime() -> Runtime:
    from worker.base.logging import configure_logging_for
    from worker.base.settings import load_settings
    from worker.edges.redis.clients import API_STORE_OUTAGE_S
    from worker.edges.runtime import Runtime

    settings = load_settings()
    # stdout is the command's answer (a turn id, a decision) and an error is one line on stderr
    # (docs/http-api.md): dres's logs below ERROR stay out of both
    configure_logging_for(settings, "ERROR")
    # a person's command says at once that Redis is unreachable (exit 2), as the API answers 503
    return Runtime.from_settings(settings, store_outage_s=API_STORE_OUTAGE_S)


def cmd_worker(args: argparse.Namespace, extra: list[str]) -> int:
    from worker.edges.cli.worker import run_worker

    return run_worker(extra, reaper=not args.no_reaper)


def cmd_demo(args: argparse.Namespace, extra: list[str]) -> int:
    from worker.base.logging import configure_logging_for
    from worker.base.settings import load_settings
    from worker.dev.demo import run_demo

    # the demo's own output is its timeline on stdout; only warnings go to the log
    configure_logging_for(load_settings(), "WARNING")
    return run_demo()


def cmd_api(args: argparse.Namespace, extra: list[str]) -> int:
    import uvicorn

    from worker.base.logging import configure_logging_for
    from worker.base.settings import load_settings
    from worker.edges.http.app import create_api
    from worker.edges.redis.policy import check_stores

    settings = load_settings()
    if not _loopback(args.host) and not settings.api_token:
        raise ConfigError(f"refusing to serve on {args.host} without DRES_API_TOKEN set")
    configure_logging_for(settings)
    check_stores(settings)
    uvicorn.run(create_api(settings), host=args.host, port=args.port, log_config=None)
    return 0


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def cmd_enqueue(args: argparse.Namespace, extra: list[str]) -> int:

    mode = "background" if args.background else "foreground"
    turn = _runtime().lifecycle.enqueue(
        args.message,
        conversation_id=args.conversation,
        mode=mode,
        model=args.model,
        double_text=args.double_text,
        tenant=args.tenant,
        loop=args.loop,
    )
    print(turn.turn_id)
    return 0


def cmd_tenant(args: argparse.Namespace, extra: list[str]) -> int:
    """A tenant now: its turns running and queued, and the limits it runs under."""
    from worker.edges.http.schemas import TenantView

    view = TenantView.model_validate(_runtime().lifecycle.tenant_view(args.tenant))
    if args.json:
        print(json.dumps(view.model_dump(mode="json"), indent=2, ensure_ascii=False))
        return 0
    limits = view.limits.model_dump()
    said = ", ".join(f"{name} {'none' if v is None else v}" for name, v in limits.items())
    print(f"{view.tenant}: {view.running} running, {view.queued} queued (limits: {said})")
    return 0


def cmd_watch(args: argparse.Namespace, extra: list[str]) -> int:
    from worker.edges.cli.watch import watch

    status = watch(
        _runtime(), args.turn_id, events=args.events, auto_continue=not args.no_auto_continue
    )
    return 0 if status == "completed" else REFUSED


def cmd_up(args: argparse.Namespace, extra: list[str]) -> int:
    from worker.base.logging import configure_logging_for
    from worker.base.settings import load_settings
    from worker.dev.up import run_up

    # its output is for a person on stdout; the worker and the API log to their own files
    configure_logging_for(load_settings(), "WARNING")
    return run_up(args.port)


def cmd_journal(args: argparse.Namespace, extra: list[str]) -> int:
    from ledger.journal import build_journal

    rt = _runtime()
    rt.ledger.meta(args.turn_id)
    journal = build_journal(rt.ledger.events(args.turn_id))
    rows = [("completed", e) for e in journal.completed]
    rows += [("interrupted", e) for e in journal.interrupted]
    if args.json:
        out = {
            kind: [
                {
                    "tool": e.tool,
                    "call_id": e.call_id,
                    "input": e.input,
                    "signature": e.signature,
                    "result": e.result,
                }
                for k, e in rows
                if k == kind
            ]
            for kind in ("completed", "interrupted")
        }
        print(json.dumps({"turn_id": args.turn_id, **out}, indent=2, ensure_ascii=False))
        return 0
    print(f"{'state':<12} {'tool':<16} {'call_id':<40} input -> result")
    for kind, entry in rows:
        result = "" if kind == "interrupted" else f" -> {json.dumps(entry.result)[:60]}"
        print(
            f"{kind:<12} {entry.tool:<16} {entry.call_id or '-':<40} "
            f"{json.dumps(entry.input)[:60]}{result}"
        )
    if not rows:
        print("(no tool calls)")
    return 0


def cmd_continue(args: argparse.Namespace, extra: list[str]) -> int:
    outcome = _runtime().lifecycle.continue_turn(args.turn_id, auto=args.auto)
    print(outcome.run_id if outcome.ok else f"refused: {outcome.reason}")
    return 0 if outcome.ok else REFUSED


def cmd_stop(args: argparse.Namespace, extra: list[str]) -> int:
    outcome = _runtime().lifecycle.stop(args.turn_id)
    print(outcome.reason if outcome.ok else f"refused: {outcome.reason}")
    return 0 if outcome.ok else REFUSED


def cmd_conversations(args: argparse.Namespace, extra: list[str]) -> int:
    found, _ = _runtime().lifecycle.store.conversations.page(limit=args.limit)
    rows = [
        {
            "conversation_id": c.conversation_id,
            "title": c.title,
            "updated_at": c.updated_at,
            "turn_id": c.newest.turn_id,
            "status": c.newest.status.value,
        }
        for c in found
    ]
    if args.json:
        print(json.dumps(rows, indent=2, ensure_ascii=False))
        return 0
    if not rows:
        print("(no conversations)")
        return 0
    print(f"{'conversation_id':<28} {'status':<10} {'turn_id':<40} title")
    for row in rows:
        print(
            f"{row['conversation_id']:<28} {row['status']:<10} {row['turn_id']:<40} {row['title']}"
        )
    return 0


def cmd_config(args: argparse.Namespace, extra: list[str]) -> int:
    from dataclasses import asdict

    from worker.base.settings import load_settings
    from worker.edges.cli.config import render, rows

    table = rows(load_settings())
    if args.json:
        print(json.dumps([asdict(row) for row in table], indent=2, ensure_ascii=False))
    else:
        print(render(table))
    return 0


def cmd_tools(args: argparse.Namespace, extra: list[str]) -> int:
    """Every registered tool: its source, read-only or write, idempotent, identity, approval."""
    from worker.base.logging import configure_logging_for
    from worker.base.settings import load_settings
    from worker.engine.tools import Registry
    from worker.engine.tools.approval import ApprovalPolicy

    settings = load_settings()
    configure_logging_for(settings, "WARNING")  # stdout is the listing's alone
    registry = Registry.from_settings(settings)
    policy = ApprovalPolicy.from_settings(settings)
    rows = [
        {
            "name": spec.name,
            "source": spec.source,
            "kind": "read-only" if spec.read_only else "write",
            "idempotent": "yes" if spec.idempotent else "no",
            "identity": ",".join(spec.identity) or "-",
            "approval": policy.waits_for(spec),
        }
        for spec in registry.schemas().values()
    ]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    table = [["TOOL", "SOURCE", "KIND", "IDEMPOTENT", "IDENTITY", "APPROVAL"]]
    table += [list(r.values()) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return 0


def cmd_approvals(args: argparse.Namespace, extra: list[str]) -> int:
    from worker.edges.cli.approvals import list_approvals

    return list_approvals(_runtime(), args)


def _decided_exit() -> dict[DecidedKind, int]:
    """A decision's outcome as the command's exit status: refused as Continue and Stop are,
    bad input as everywhere (docs/http-api.md)."""
    from worker.lifecycle.approvals import DecidedKind

    return {
        DecidedKind.DECIDED: 0,
        DecidedKind.ALREADY: REFUSED,
        DecidedKind.NOT_WAITING: REFUSED,
        DecidedKind.WRONG_SIGNATURE: REFUSED,
        DecidedKind.CONTENDED: REFUSED,
        DecidedKind.INVALID: USAGE_ERROR,
        DecidedKind.UNKNOWN: USAGE_ERROR,
    }


def cmd_decide(args: argparse.Namespace, extra: list[str]) -> int:
    from worker.base.settings import load_settings
    from worker.edges.cli.approvals import decide, decider
    from worker.lifecycle.approvals import DecidedKind

    by = decider(load_settings(), args.token, args.by)  # before Redis: a bad token is bad input
    decided = decide(_runtime(), args, by)
    if decided.kind == DecidedKind.UNKNOWN:  # no such request: bad input, as an unknown turn is
        return _fail(decided.detail)
    print(decided.detail if decided.ok else f"refused: {decided.detail}")
    return _decided_exit()[decided.kind]


def cmd_schedule(args: argparse.Namespace, extra: list[str]) -> int:
    from worker.edges.cli.schedules import run

    return run(_runtime(), args)


COMMANDS: dict[str, Callable[[argparse.Namespace, list[str]], int]] = {
    "approvals": cmd_approvals,
    "config": cmd_config,
    "conversations": cmd_conversations,
    "approve": cmd_decide,
    "deny": cmd_decide,
    "worker": cmd_worker,
    "demo": cmd_demo,
    "api": cmd_api,
    "enqueue": cmd_enqueue,
    "watch": cmd_watch,
    "journal": cmd_journal,
    "continue": cmd_continue,
    "stop": cmd_stop,
    "tenant": cmd_tenant,
    "up": cmd_up,
    "tools": cmd_tools,
    "schedule": cmd_schedule,
}


def _an_id(value: str) -> str:
    """An id as the API takes one (docs/http-api.md, "Errors"); else a usage error."""
    from ledger.ids import ID_RULE, is_id

    if not is_id(value):
        raise argparse.ArgumentTypeError(f"{ID_RULE}, not {value!r}")
    return value


def _a_tenant(value: str) -> str:
    """A tenant's id as the API takes one (docs/http-api.md, "Tenants"); else a usage error."""
    from ledger.ids import TENANT_RULE, is_tenant

    if not is_tenant(value):
        raise argparse.ArgumentTypeError(f"{TENANT_RULE}, not {value!r}")
    return value


class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line too, like every other bad input (exit 2)."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(USAGE_ERROR)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="dres", description="durable resume for agent turns")
    sub = parser.add_subparsers(dest="command", required=True)
    worker = sub.add_parser("worker", help="a prefork Celery worker with dres's settings")
    worker.add_argument("--no-reaper", action="store_true", help="do not run the reaper here")
    sub.add_parser("demo", help="run the demo turn on embedded defaults")
    api = sub.add_parser("api", help="serve the HTTP API")
    api.add_argument("--host", default="127.0.0.1")
    api.add_argument("--port", type=int, default=8000)
    enq = sub.add_parser("enqueue", help="enqueue a turn; prints its turn_id")
    enq.add_argument("message")
    enq.add_argument("--conversation", default=None, type=_an_id)
    enq.add_argument("--background", action="store_true")
    enq.add_argument("--model", default=None, help="scripted:PATH, anthropic:MODEL, openai:MODEL")
    enq.add_argument(
        "--double-text",
        choices=("queue", "interrupt", "reject"),
        default=None,
        help="while a turn of the conversation is live: wait for it, stop it, or refuse "
        "(default DRES_DOUBLE_TEXT)",
    )
    enq.add_argument(
        "--tenant",
        default=None,
        type=_a_tenant,
        help="the tenant whose limits the turn runs under (default: default)",
    )
    enq.add_argument(
        "--loop",
        default=None,
        metavar="SPEC",
        help="the agent loop the turn runs, one of DRES_LOOP's entries (default: its first)",
    )
    for name, text in (
        ("watch", "follow a turn's events until it ends"),
        ("journal", "the turn's completed and interrupted tool calls"),
        ("continue", "continue a stopped turn"),
        ("stop", "stop a turn"),
    ):
        command = sub.add_parser(name, help=text)
        command.add_argument("turn_id")
    sub.choices["journal"].add_argument("--json", action="store_true")
    sub.choices["watch"].add_argument(
        "--events", action="store_true", help="every event on its own line, with its stream id"
    )
    sub.choices["watch"].add_argument(
        "--no-auto-continue",
        action="store_true",
        help="do not continue a time-limit stop (crash, lost hand-off, chunk limit) on my own",
    )
    approvals = sub.add_parser("approvals", help="approval requests waiting, newest first")
    approvals.add_argument("--json", action="store_true")
    approvals.add_argument("--limit", type=int, default=50)
    config = sub.add_parser(
        "config", help="every DRES_* setting: its value (secrets masked), default and meaning"
    )
    config.add_argument("--json", action="store_true")
    conversations = sub.add_parser(
        "conversations", help="conversations, most recently updated first"
    )
    conversations.add_argument("--json", action="store_true")
    conversations.add_argument("--limit", type=int, default=50)
    for name, text in (
        ("approve", "approve a call that waits: it runs once, with the input listed"),
        ("deny", "deny a call that waits: it does not run; the model is told why"),
    ):
        decide = sub.add_parser(name, help=text)
        decide.add_argument("turn_id")
        decide.add_argument("approval_id")
        decide.add_argument("--reason", default=None)
        decide.add_argument("--by", default=None, help="who decides (default: cli)")
        decide.add_argument(
            "--token",
            default=None,
            help="an approver's token: required when DRES_APPROVER_TOKENS is set (by: its name)",
        )
        decide.add_argument(
            "--signature", default=None, help="the request's signature (default: as requested)"
        )
    tenant = sub.add_parser(
        "tenant", help="a tenant's turns running and queued now, and the limits they run under"
    )
    tenant.add_argument("tenant", type=_a_tenant)
    tenant.add_argument("--json", action="store_true")
    tools = sub.add_parser(
        "tools", help="every registered tool: source, read-only or write, idempotent, approval"
    )
    tools.add_argument("--json", action="store_true")
    add_schedule_parser(sub, _an_id, _a_tenant)
    up = sub.add_parser("up", help="redis, a worker and the API with the page: try dres here")
    up.add_argument("--port", type=int, default=8000, help="the API's and the page's port")
    sub.choices["continue"].add_argument(
        "--auto", action="store_true", help="count it as an automatic continuation"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.command != "worker":
        return _fail(f"unexpected arguments: {' '.join(extra)}")
    try:
        return COMMANDS[args.command](args, extra)
    except LedgerUnavailable as e:  # its outage window ran out (``dres watch``'s reads)
        return _fail(f"cannot reach Redis at {_ledger_name()}: {e}")
    except DresBaseError as e:
        return _fail(str(e))
    except (redis.ConnectionError, redis.TimeoutError) as e:
        return _fail(f"cannot reach Redis at {_ledger_name()}: {e}")
    except kombu.exceptions.OperationalError as e:
        # Celery's publish (a chunk's message, a revoke) raises kombu's error for a broker it
        # cannot reach: one line naming the broker, as an unreachable ledger gets
        return _fail(f"cannot reach {_broker_name()}: {e}")
    except KeyboardInterrupt:
        return 130
