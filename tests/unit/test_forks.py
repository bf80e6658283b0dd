"""A fork waits for the main process's threads to leave ``no_fork()`` (``worker.base.forks``).

The hazard is real and shown first: a thread mid-way through a first import when the process
forks leaves that module's import lock held in the child, and the child's own import of it
blocks for ever. Each case runs in its own process (``register_at_fork`` cannot be undone).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rigs.processes import subprocess_env

SCENARIO = """
import os, signal, sys, threading
sys.path.insert(0, sys.argv[2])
import gate
from worker.base.forks import guard_forks, no_fork

if sys.argv[1] == "guarded":
    guard_forks()

def first_import():
    with no_fork():
        import slow_first_import

threading.Thread(target=first_import).start()
assert gate.entered.wait(5), "the thread never began its import"
threading.Timer(0.2, gate.release.set).start()
pid = os.fork()
if pid == 0:
    signal.alarm(1)  # the default action kills the child: it was stuck on the import lock
    import slow_first_import
    os._exit(0)
print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""


def fork_during_an_import(tmp_path: Path, mode: str) -> int:
    (tmp_path / "gate.py").write_text(
        "import threading\nentered = threading.Event()\nrelease = threading.Event()\n"
    )
    (tmp_path / "slow_first_import.py").write_text(
        "import gate\ngate.entered.set()\ngate.release.wait()\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", SCENARIO, mode, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return int(out.stdout.strip())


def test_an_unguarded_fork_during_an_import_leaves_the_child_stuck(tmp_path: Path) -> None:
    assert fork_during_an_import(tmp_path, "unguarded") == -14  # SIGALRM: never imported


def test_a_guarded_fork_waits_for_the_import_and_the_child_imports(tmp_path: Path) -> None:
    assert fork_during_an_import(tmp_path, "guarded") == 0


@pytest.mark.parametrize("spec", ["scripted:", "anthropic:claude-x"])
def test_a_worker_loads_what_its_chunks_and_sweeps_import_before_its_pool_forks(
    spec: str,
) -> None:
    code = (
        "import sys; from worker.base.settings import load_settings; "
        "from worker.edges.runtime import Runtime; "
        "from worker.edges.cli.worker import load_before_fork; "
        "load_before_fork(Runtime.from_settings(load_settings())); "
        "print(*(m in sys.modules for m in "
        "('sample_tools', 'httpx', 'prometheus_client', 'anthropic')))"
    )
    # DRES_AGENTS names an app: call_agent's httpx is then what a chunk would import
    dres = {
        "DRES_TOOLS": "worker.demo_tools,sample_tools",
        "DRES_MODEL": spec,
        "DRES_AGENTS": '{"peer": {"url": "http://127.0.0.1:9"}}',
    }
    env = subprocess_env(dres, Path(__file__).parents[1])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    loaded = out.stdout.splitlines()[-1].split()  # the log line "tools loaded" comes first
    assert loaded == ["True", "True", "True", str(spec.startswith("anthropic"))]
