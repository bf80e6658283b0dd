"""Tokens at start (docs/configuration.md): DRES_API_TOKEN and every token of
DRES_APPROVER_TOKENS are at least 32 characters, an approver's token is never the API token, and
each refusal is one line naming the variable, before anything is served."""

from __future__ import annotations

import json
import os

import pytest

from worker.base.errors import ConfigError
from worker.base.settings import load_settings
from worker.edges.cli.main import main

LONG = "t" * 32


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in list(os.environ):
        if name.startswith("DRES_"):
            monkeypatch.delenv(name)
    return monkeypatch


@pytest.mark.parametrize(
    ("overrides", "line"),
    [
        ({"api_token": "t" * 31}, r"^DRES_API_TOKEN: must be at least 32 characters \(has 31\)"),
        (
            {"approver_tokens": json.dumps({"ana": LONG, "ops": "short"})},
            r"^DRES_APPROVER_TOKENS: the token of 'ops' must be at least 32 characters",
        ),
        ({"approver_tokens": "[]"}, r"^DRES_APPROVER_TOKENS: must be a JSON object"),
        ({"approver_tokens": "{"}, r"^DRES_APPROVER_TOKENS: must be a JSON object"),
        ({"approver_tokens": json.dumps({" ": LONG})}, r"^DRES_APPROVER_TOKENS: an approver's"),
        ({"approver_tokens": json.dumps({"a": 1})}, r"^DRES_APPROVER_TOKENS: the token of 'a'"),
        (
            {"approver_tokens": json.dumps({"ana": LONG, "ops": LONG})},
            r"^DRES_APPROVER_TOKENS: two approvers have the same token",
        ),
        (
            {"api_token": LONG, "approver_tokens": json.dumps({"ana": LONG})},
            r"^DRES_APPROVER_TOKENS: an approver's token is DRES_API_TOKEN",
        ),
    ],
    ids=[
        "short-api",
        "short-approver",
        "not-an-object",
        "not-json",
        "blank-name",
        "not-a-string",
        "shared",
        "the-api-token",
    ],
)
def test_a_bad_token_fails_at_start_with_one_line_naming_the_variable(
    overrides: dict[str, str], line: str
) -> None:
    with pytest.raises(ConfigError, match=line) as caught:
        load_settings(**overrides)
    assert "\n" not in str(caught.value)


def test_long_tokens_are_taken_and_an_empty_api_token_is_none() -> None:
    settings = load_settings(api_token=LONG, approver_tokens=json.dumps({"ana": "a" * 40}))
    assert settings.api_token == LONG
    assert settings.approver_named("a" * 40) == "ana"
    assert settings.approver_named(LONG) is None
    assert load_settings(api_token="").api_token is None


def test_dres_api_with_a_short_token_exits_2_naming_it_before_serving(
    clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    clean_env.setenv("DRES_API_TOKEN", "hunter2")
    assert main(["api", "--port", "9"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("dres: DRES_API_TOKEN: must be at least 32 characters")
    assert "hunter2" not in line
