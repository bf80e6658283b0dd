"""The page's JavaScript that needs no browser: ``node --test tests/js`` (the turn state's fold,
worker/edges/http/static/turnstate.js), run here so ``make test`` and CI run it. A machine without
node skips it locally and fails it under ``CI=true``."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support import IN_CI

JS_TESTS = Path(__file__).resolve().parents[1] / "js"


def test_the_page_modules_pass_their_node_tests() -> None:
    node = shutil.which("node")
    if node is None:
        if IN_CI:
            pytest.fail("CI=true requires node for tests/js", pytrace=False)
        pytest.skip("no node on this machine")
    done = subprocess.run(
        [node, "--test", *sorted(str(p) for p in JS_TESTS.glob("*.test.mjs"))],
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
