"""``dres config`` (docs/commands.md) and the reference's table of settings (docs/configuration.md):
both come from the settings class, every setting with its default and a line of meaning, and
secrets never show."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from rigs import ROOT
from rigs.processes import subprocess_env
from worker.base.settings import Settings
from worker.edges.cli.config import MASK, rows
from worker.edges.cli.main import main

#: a row of the reference's table: | `DRES_NAME` | `default` | meaning |
TABLE_ROW = re.compile(r"^\| `(DRES_[A-Z0-9_]+)` \| `([^`]*)` \| (.+) \|$")


def reference_table() -> dict[str, tuple[str, str]]:
    text = (ROOT / "docs" / "configuration.md").read_text()
    found: dict[str, tuple[str, str]] = {}
    for line in text.splitlines():
        match = TABLE_ROW.match(line)
        if match:
            assert match.group(1) not in found, f"{match.group(1)} is listed twice"
            found[match.group(1)] = (match.group(2), match.group(3))
    return found


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in list(os.environ):
        if name.startswith("DRES_"):
            monkeypatch.delenv(name)
    return monkeypatch


def config_json(capsys: pytest.CaptureFixture[str]) -> list[dict[str, str]]:
    assert main(["config", "--json"]) == 0
    printed: list[dict[str, str]] = json.loads(capsys.readouterr().out)
    return printed


def test_every_field_of_the_settings_class_has_a_line_of_meaning() -> None:
    for name, field in Settings.model_fields.items():
        assert field.description, f"DRES_{name.upper()} has no description"
        assert "\n" not in field.description and len(field.description) <= 100, name


def test_the_reference_lists_exactly_the_settings_with_their_defaults(
    clean_env: pytest.MonkeyPatch,
) -> None:
    documented = reference_table()
    expected = {row.variable: row.default for row in rows(Settings())}
    assert set(documented) == set(expected), (
        f"missing from docs/configuration.md: {sorted(set(expected) - set(documented))}; "
        f"not settings: {sorted(set(documented) - set(expected))}"
    )
    wrong = {v: (d, expected[v]) for v, (d, _) in documented.items() if d != expected[v]}
    assert not wrong, f"defaults that differ (documented, actual): {wrong}"


def test_dres_config_prints_each_setting_with_value_default_and_meaning(
    clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    clean_env.setenv("DRES_SOFT_LIMIT_S", "5")
    printed = {row["variable"]: row for row in config_json(capsys)}
    assert set(printed) == {"DRES_" + name.upper() for name in Settings.model_fields}
    assert printed["DRES_SOFT_LIMIT_S"] == {
        "variable": "DRES_SOFT_LIMIT_S",
        "value": "5",
        "default": "60",
        "meaning": Settings.model_fields["soft_limit_s"].description,
    }

    assert main(["config"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["variable", "value", "default", "meaning"]
    assert len(table) == 1 + len(Settings.model_fields)


def test_dres_config_masks_tokens_passwords_and_the_password_of_a_url(
    clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    secrets = {
        "DRES_API_TOKEN": "tok-secret-1-" + "x" * 32,
        "DRES_REDIS_URL": "redis://app:pw-secret-2@127.0.0.1:6390/0",
        "DRES_BROKER_URL": "redis://:pw-secret-3@127.0.0.1:6391/0",
        "DRES_AGENTS": '{"billing": {"url": "http://b.example", "token": "tok-secret-4"}}',
        "DRES_APPROVAL_WEBHOOK": "https://hook:pw-secret-5@hooks.example/x",
        "DRES_APPROVER_TOKENS": json.dumps({"ana": "approver-secret-6-" + "y" * 32}),
    }
    for name, value in secrets.items():
        clean_env.setenv(name, value)
    printed = {row["variable"]: row["value"] for row in config_json(capsys)}
    assert "secret" not in json.dumps(printed)
    assert printed["DRES_API_TOKEN"] == MASK
    assert printed["DRES_REDIS_URL"] == f"redis://app:{MASK}@127.0.0.1:6390/0"
    assert printed["DRES_BROKER_URL"] == f"redis://:{MASK}@127.0.0.1:6391/0"
    assert json.loads(printed["DRES_AGENTS"])["billing"] == {
        "url": "http://b.example",
        "token": MASK,
    }
    assert json.loads(printed["DRES_APPROVER_TOKENS"]) == {"ana": MASK}


def test_no_secret_of_a_settings_environment_shows_in_dres_config_or_its_json(
    clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Tokens, passwords, URL userinfo, a webhook's path and query, agents' tokens and every MCP
    ``env`` and MCP or OpenAPI ``headers`` value are masked in both outputs (their keys kept)."""
    mcp = {
        "files": {"command": ["prog", "--stdio"], "env": {"FILES_KEY": "env-secret-1"}},
        "remote": {
            "url": "http://mcp:url-secret-2@127.0.0.1:9/mcp",
            "headers": {"Authorization": "Bearer header-secret-3"},
        },
    }
    openapi = {
        "billing": {
            "spec": "http://127.0.0.1:9/openapi.json",
            "base_url": "http://127.0.0.1:9",
            "headers": {"X-Api-Key": "header-secret-4"},
        }
    }
    secrets = {
        "DRES_API_TOKEN": "tok-secret-5-" + "x" * 32,
        "DRES_REDIS_URL": "redis://app:pw-secret-6@127.0.0.1:6390/0",
        "DRES_BROKER_URL": "redis://:pw-secret-7@127.0.0.1:6391/0",
        "DRES_AGENTS": '{"billing": {"url": "http://b.example", "token": "tok-secret-8"}}',
        "DRES_APPROVAL_WEBHOOK": "https://hooks.example/services/path-secret-9?key=q-secret-10",
        "DRES_MCP_SERVERS": json.dumps(mcp),
        "DRES_OPENAPI": json.dumps(openapi),
        "DRES_APPROVAL_WEBHOOK_SECRET": "whsec_c2VjcmV0LTExLWtleQ==",
    }
    for name, value in secrets.items():
        clean_env.setenv(name, value)
    assert main(["config"]) == 0
    table = capsys.readouterr().out
    printed = {row["variable"]: row["value"] for row in config_json(capsys)}
    for output in (table, json.dumps(printed)):
        assert "secret" not in output and "c2VjcmV0" not in output, output
    assert json.loads(printed["DRES_MCP_SERVERS"])["files"]["env"] == {"FILES_KEY": MASK}
    assert json.loads(printed["DRES_MCP_SERVERS"])["remote"]["headers"] == {"Authorization": MASK}
    assert json.loads(printed["DRES_OPENAPI"])["billing"]["headers"] == {"X-Api-Key": MASK}
    assert printed["DRES_APPROVAL_WEBHOOK"] == f"https://hooks.example/{MASK}?{MASK}"


#: every form a secret takes in the settings (docs/security.md), each value holding ``SEKRET``
EVERY_SECRET_FORM = {
    "DRES_REDIS_URL": "redis://127.0.0.1:6390/0?password=redis-SEKRET-1&db=0",
    "DRES_BROKER_URL": "redis://app:broker-SEKRET-2@127.0.0.1:6391/0?token=broker-SEKRET-3",
    "DRES_PUBLIC_URL": "https://u:SEKRET-4@dres.example/?access_token=SEKRET-5",
    "DRES_APPROVAL_WEBHOOK": "https://hooks.example/services/SEKRET-6?key=SEKRET-7",
    "DRES_MCP_SERVERS": json.dumps(
        {
            "files": {
                "command": [
                    "npx",
                    "-y",
                    "@acme/server-files",
                    "--api-key",
                    "sk-SEKRET-8",
                    "--token=SEKRET-9",
                    "postgresql://u:SEKRET-10@db/app",
                    "xoxb-SEKRET-11",
                ],
                "env": {"FILES_KEY": "SEKRET-12"},
            },
            "remote": {
                "url": "http://mcp:SEKRET-13@127.0.0.1:9/mcp?token=SEKRET-14",
                "headers": {"Authorization": "Bearer SEKRET-15"},
            },
        }
    ),
    "DRES_OPENAPI": json.dumps(
        {
            "billing": {
                "spec": "http://u:SEKRET-16@127.0.0.1:9/o.json?api_key=SEKRET-17",
                "base_url": "http://127.0.0.1:9/v1?sig=SEKRET-18",
                "headers": {"X-Api-Key": "SEKRET-19"},
            }
        }
    ),
    "DRES_AGENTS": json.dumps(
        {"billing": {"url": "http://b.example/?access_token=SEKRET-20", "token": "SEKRET-21"}}
    ),
}


@pytest.mark.parametrize("form", [[], ["--json"]])
def test_dres_config_as_a_process_shows_no_secret_of_any_form(form: list[str]) -> None:
    """A user's ``dres config`` with every form of secret set: none of them in what it prints,
    and where each setting points still there (hosts, query keys, the MCP program, header
    names)."""
    done = subprocess.run(
        [sys.executable, "-m", "worker.edges.cli", "config", *form],
        cwd=ROOT,
        env=subprocess_env(EVERY_SECRET_FORM),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "SEKRET" not in done.stdout + done.stderr, done.stdout
    for kept in ("127.0.0.1:6390", "db=0", "app:****@", "npx", "token=****", "FILES_KEY"):
        assert kept in done.stdout, (kept, done.stdout)


def test_dres_up_s_banner_names_a_configured_redis_without_its_password(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``dres up`` prints which Redis it uses: a DRES_REDIS_URL's password is not in it."""
    from worker.dev.embedded import embedded_redis

    for url in (
        "redis://app:s3cret-pw@10.0.0.5:6380/2",
        "redis://10.0.0.5:6380/2?password=s3cret-pw",
    ):
        monkeypatch.setenv("DRES_REDIS_URL", url)
        with embedded_redis() as redis_info:
            assert "s3cret-pw" not in redis_info.description
            assert "10.0.0.5:6380" in redis_info.description
            assert redis_info.url == url  # used as given
