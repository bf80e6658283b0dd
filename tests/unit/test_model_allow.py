"""The model allow-list of API clients (DRES_MODELS, docs/configuration.md): the pure rule and its
parse."""

from __future__ import annotations

import pytest

from worker.base.errors import ConfigError
from worker.engine.models.allow import model_refusal, parse_allowed

DEFAULT = "scripted:/srv/dres/default.json"


def refusal(spec: str | None, listed: str = "") -> str | None:
    return model_refusal(spec, default=DEFAULT, allowed=parse_allowed(listed))


@pytest.mark.parametrize("spec", [None, "", DEFAULT])
def test_the_default_model_is_always_allowed(spec: str | None) -> None:
    assert refusal(spec) is None


@pytest.mark.parametrize(
    ("spec", "listed"),
    [
        ("anthropic:claude-x", "anthropic:claude-x"),
        ("anthropic:claude-x", "openai:gpt-y, anthropic:claude-x"),
        ("anthropic:claude-x", "anthropic:*"),
        ("openai:gpt-y", "anthropic:claude-x,openai:*"),
        ("scripted:/srv/dres/other.json", "scripted:/srv/dres/other.json"),
    ],
)
def test_a_listed_spec_or_one_its_providers_star_covers_is_allowed(spec: str, listed: str) -> None:
    assert refusal(spec, listed) is None


@pytest.mark.parametrize(
    ("spec", "listed"),
    [
        ("anthropic:x", ""),
        ("anthropic:x", "anthropic:claude-x"),
        ("anthropic:x", "openai:*"),
        ("anthropic:*", "anthropic:*"),
        ("anthropic:", "anthropic:*"),
        ("scripted:/etc/passwd", "anthropic:*,openai:*"),
        ("scripted:/srv/dres/./other.json", "scripted:/srv/dres/other.json"),
        ("scripted:", ""),
        ("bogus:x", "anthropic:*"),
    ],
)
def test_any_other_spec_is_refused_with_one_line_naming_it_and_dres_models(
    spec: str, listed: str
) -> None:
    reason = refusal(spec, listed)
    assert reason is not None
    assert repr(spec) in reason and "DRES_MODELS" in reason
    assert "\n" not in reason


def test_a_refusal_of_a_spec_with_a_newline_stays_one_line() -> None:
    reason = refusal("scripted:/x\nroot:x:0:0")
    assert reason is not None and "\n" not in reason


def test_an_empty_list_parses_to_nothing_and_blanks_are_skipped() -> None:
    assert parse_allowed("") == frozenset()
    assert parse_allowed(" anthropic:a , ,openai:*") == {"anthropic:a", "openai:*"}


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        ("claude", "'claude'"),
        ("bogus:x", "'bogus:x'"),
        ("anthropic:", "'anthropic:'"),
        ("scripted:*", "exact path"),
        ("scripted:/srv/*.json", "exact path"),
        ("scripted:relative.json", "absolute"),
        ("anthropic:claude-*", "stands alone"),
    ],
)
def test_a_bad_entry_is_a_config_error_of_one_line_naming_dres_models(raw: str, named: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_allowed(f"openai:*,{raw}")
    message = str(info.value)
    assert message.startswith("DRES_MODELS: ") and named in message
    assert "\n" not in message
