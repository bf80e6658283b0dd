"""What is the suite's own, not a rig's: its dres settings, where its tools live, and what a
missing service or package does to a test (skip locally, fail under ``CI=true``)."""

from __future__ import annotations

import importlib
import os

import pytest

from rigs.processes import ROOT

TESTS = ROOT / "tests"
#: under CI a missing service or package fails a test instead of skipping it
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}

#: the dres settings of the tests (seconds): 0.5 s soft limits, a 3 s hard limit, a lease of 1 s
#: (renewed every third of it), a fast reaper; the tools of ``tests/sample_tools.py`` too
DRES_ENV = {
    "DRES_TOOLS": "worker.demo_tools,sample_tools",
    "DRES_SOFT_LIMIT_S": "0.5",
    "DRES_HARD_LIMIT_S": "3",
    "DRES_BG_SOFT_LIMIT_S": "0.5",
    "DRES_BG_HARD_LIMIT_S": "3",
    "DRES_VISIBILITY_TIMEOUT_S": "8",
    "DRES_LEASE_S": "1",
    "DRES_HANDOFF_GRACE_S": "1",
    "DRES_REAPER_INTERVAL_S": "0.2",
    "DRES_CANCEL_POLL_S": "0.05",
}


def require_sdk(package: str) -> None:
    """The SDKs are in the ``dev`` extra: missing locally skips, missing under CI fails."""
    try:
        importlib.import_module(package)
    except ImportError:
        if IN_CI:
            pytest.fail(f"CI=true requires the {package} package", pytrace=False)
        pytest.skip(f"the {package} package is not installed")
