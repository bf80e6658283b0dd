"""A worker imports the SDKs its models name before it forks its pool (no chunk pays for it)."""

from __future__ import annotations

import subprocess
import sys

from worker.engine.models import preload_sdks


def test_only_the_installed_sdks_the_specs_name_are_imported() -> None:
    assert preload_sdks(["scripted:/a.json", "", "openai:gpt", "anthropic:*", "openai:x"]) == [
        "anthropic",
        "openai",
    ]
    assert preload_sdks(["scripted:/a.json", ""]) == []


def test_a_spec_naming_no_provider_imports_no_sdk() -> None:
    code = (
        "import sys; from worker.engine.models import preload_sdks; "
        "preload_sdks(['scripted:/a.json']); "
        "print('anthropic' in sys.modules, 'openai' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
