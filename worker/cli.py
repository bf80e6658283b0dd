"""The ``dres`` command (CONTRACT §2). Bad input or an unreachable Redis: one line, exit 2."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

import redis

from ledger.errors import LedgerError
from worker.errors import DresError

#: exit status for bad input, bad configuration or an unreachable Redis
USAGE_ERROR = 2


def _fail(message: str) -> int:
    print(f"dres: {message}", file=sys.stderr)
    return USAGE_ERROR


def cmd_worker(args: argparse.Namespace, extra: list[str]) -> int:
    from worker.worker_main import run_worker

    return run_worker(extra, reaper=not args.no_reaper)


def cmd_demo(args: argparse.Namespace, extra: list[str]) -> int:
    from worker.demo import run_demo

    return run_demo()


COMMANDS: dict[str, Callable[[argparse.Namespace, list[str]], int]] = {
    "worker": cmd_worker,
    "demo": cmd_demo,
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dres", description="durable resume for agent turns")
    sub = parser.add_subparsers(dest="command", required=True)
    worker = sub.add_parser("worker", help="a prefork Celery worker with dres's settings")
    worker.add_argument("--no-reaper", action="store_true", help="do not run the reaper here")
    sub.add_parser("demo", help="run the demo turn on embedded defaults")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.command != "worker":
        return _fail(f"unexpected arguments: {' '.join(extra)}")
    try:
        return COMMANDS[args.command](args, extra)
    except (DresError, LedgerError) as e:
        return _fail(str(e))
    except redis.ConnectionError as e:
        return _fail(f"cannot reach Redis: {e}")
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
