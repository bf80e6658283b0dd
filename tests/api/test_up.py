"""``dres up`` (docs/commands.md) as a person runs it: a subprocess that starts its own
redis-server, a worker and the API with the page, prints the page's URL (with the random token it
gave the API), and stops every one on Ctrl-C.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from rigs import ROOT, wait_until
from worker.dev.redis_server import free_port

pytestmark = pytest.mark.redis_server

URL = re.compile(r"open (http://127\.0\.0\.1:\d+)/(?:#token=(\S+))?")


def descendants(pid: int) -> set[int]:
    """Every living process below ``pid`` (a /proc scan, children of children too)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                parents[int(entry.name)] = int(fields[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_dres_up_serves_the_page_at_the_url_it_prints_and_a_signal_stops_every_child(
    dres_env: dict[str, str], tmp_path: Path, signum: signal.Signals
) -> None:
    env = {k: v for k, v in dres_env.items() if k != "DRES_REDIS_URL"}  # it starts its own
    log = tmp_path / "up.log"
    with log.open("wb") as out:
        up = subprocess.Popen(
            [sys.executable, "-m", "worker.edges.cli", "up", "--port", str(free_port())],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        found = wait_until(lambda: URL.search(log.read_text()), timeout=40, what="the URL")
        url, token = found.group(1), found.group(2)
        page = httpx.get(f"{url}/", timeout=10)
        assert page.status_code == 200
        assert 'data-testid="composer"' in page.text
        health = {"redis": "ok", "broker": "ok", "workers": 1}  # its worker says it is alive
        wait_until(lambda: httpx.get(f"{url}/healthz", timeout=10).json() == health, timeout=30)
        # no DRES_API_TOKEN was set: the API wants the random one the printed URL carries
        assert token is not None and len(token) >= 32, log.read_text()
        assert httpx.get(f"{url}/v1/conversations", timeout=10).status_code == 401
        auth = {"Authorization": f"Bearer {token}"}
        assert httpx.get(f"{url}/v1/conversations", headers=auth, timeout=10).status_code == 200
        children = descendants(up.pid)
        assert len(children) >= 4, children  # redis-server, worker, its pool process, api

        up.send_signal(signum)
        assert up.wait(timeout=30) == 0, log.read_text()
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()
    assert "stopping" in log.read_text()
    wait_until(lambda: not any(alive(pid) for pid in children), 10, "every child stopped")


@pytest.mark.parametrize(
    ("loop", "tool", "arguments"),
    [
        ("pydantic_ai:pydantic_ai_agent:agent", "lookup_order", {"order_id": "A1"}),
        ("openai_agents:openai_agents_agent:agent", "get_ticket", {"ticket_id": "T1"}),
    ],
    ids=["pydantic_ai", "openai_agents"],
)
def test_dres_up_runs_each_examples_framework_agent_as_its_header_says(
    dres_env: dict[str, str], tmp_path: Path, loop: str, tool: str, arguments: dict[str, str]
) -> None:
    """examples/ (docs/loops.md): ``DRES_LOOP=… dres up`` from the examples' directory, against
    the fake OpenAI-compatible server: a turn runs the example's agent, its read-only lookup
    recorded as a call."""
    from rigs.providers import OpenAIDialect, fake_provider

    openai = OpenAIDialect()
    # its own Redis; the default tools (the tests' own are not on the examples' path)
    env = {k: v for k, v in dres_env.items() if k not in ("DRES_REDIS_URL", "DRES_TOOLS")}
    log = tmp_path / "up.log"
    with fake_provider() as fake:
        fake.script(openai.tool_call("c1", tool, arguments), openai.text("All good."))
        examples = ROOT / "examples"
        env.update(openai.env(fake.url), PYTHONPATH=str(examples), DRES_LOOP=loop)
        env.update(OPENAI_MODEL="gpt-test", DRES_SOFT_LIMIT_S="20", DRES_HARD_LIMIT_S="40")
        env.update(DRES_VISIBILITY_TIMEOUT_S="60")
        with log.open("wb") as out:
            up = subprocess.Popen(
                [sys.executable, "-m", "worker.edges.cli", "up", "--port", str(free_port())],
                cwd=examples,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            found = wait_until(lambda: URL.search(log.read_text()), timeout=40, what="the URL")
            auth = {"Authorization": f"Bearer {found.group(2)}"}
            with httpx.Client(base_url=found.group(1), headers=auth, timeout=10) as http:
                turn = http.post("/v1/turns", json={"message": "check it"}).json()["turn_id"]

                def ended() -> dict[str, object] | None:
                    view: dict[str, object] = http.get(f"/v1/turns/{turn}").json()
                    return view if view["status"] in ("completed", "stopped") else None

                view = wait_until(ended, timeout=30, what="the turn's end")
                assert view["status"] == "completed", (view, log.read_text()[-3000:])
                events = http.get(f"/v1/turns/{turn}/events", params={"stream": "false"}).text
            assert f'"tool": "{tool}"' in events or f'"tool":"{tool}"' in events
            assert "All good." in events
        finally:
            print(log.read_text()[-4000:])
            up.send_signal(signal.SIGINT)
            try:
                up.wait(timeout=30)
            except subprocess.TimeoutExpired:
                up.kill()
                up.wait()
