"""A flame graph of row 4 (resume): py-spy records a real worker's pool processes while a turn
crosses chunk boundaries at the soft limit (``bench.celery_bench``'s resume round).

The pool processes sleep through each chunk's "thinking" step; py-spy leaves idle threads out,
so what it records is the work around the boundaries: the hand-over, the successor's claim, the
journal, the prompt. Needs py-spy (``uv pip install --target DIR py-spy``; not a dependency).

Run from the project root:
``.venv/bin/python -m bench.profile_resume --py-spy /path/to/py-spy --out bench/profiles/resume``
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import tempfile
from pathlib import Path

from bench.celery_bench import dres_resume_round, resume_script, running_worker
from tests.support import write_script
from worker.dev.redis_server import RedisServer


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile_resume")
    parser.add_argument("--py-spy", default="py-spy", help="the py-spy binary")
    parser.add_argument("--out", type=Path, default=Path("bench/profiles/resume"))
    parser.add_argument("--boundaries", type=int, default=60)
    args = parser.parse_args()
    server = RedisServer()
    server.start()
    try:
        with running_worker(server.url) as (rt, worker, tmp):
            warm = write_script(tmp / "warm.json", resume_script(2))
            dres_resume_round(rt, warm, 2)
            model = write_script(tmp / "resume.json", resume_script(args.boundaries))
            args.out.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory() as spy_tmp:
                raw = Path(spy_tmp) / "resume.txt"
                spy = subprocess.Popen(
                    [args.py_spy, "record", "--pid", str(worker.pid), "--subprocesses",
                     "--rate", "2000", "--format", "raw", "--output", str(raw), "--nonblocking"],
                )  # fmt: skip
                try:
                    result = dres_resume_round(rt, model, args.boundaries)
                finally:
                    spy.send_signal(signal.SIGINT)
                    spy.wait(30)
                folded = raw.read_text()
            args.out.with_suffix(".folded").write_text(folded)
            print(f"{len(result.latency)} boundaries; median latency "
                  f"{sorted(result.latency)[len(result.latency) // 2] * 1000:.2f} ms")  # fmt: skip
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
