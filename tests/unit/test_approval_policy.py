"""Which calls wait for a person (docs/configuration.md DRES_APPROVAL, docs/tools.md
``needs_approval``, docs/semantics.md): the declarations ``@tool`` refuses, DRES_APPROVAL's parsing
and its check against the registry, and ``ApprovalPolicy.needed`` for each kind of rule."""

from __future__ import annotations

from typing import Any

import pytest

from worker.base.errors import ConfigError, ToolDefinitionError
from worker.base.settings import load_settings
from worker.engine.tools import Registry, ToolContext, tool
from worker.engine.tools.approval import ApprovalPolicy
from worker.engine.tools.spec import SPEC_ATTR, ToolSpec

CTX = ToolContext(turn_id="turn_1", run_id="run_1", call_id="call_1", idempotency_key="k")


def spec_of(fn: Any) -> ToolSpec:
    spec = getattr(fn, SPEC_ATTR)
    assert isinstance(spec, ToolSpec)
    return spec


@tool
def plain_write(value: int) -> None: ...


@tool(needs_approval=True)
def always_asks(value: int) -> None: ...


@tool(read_only=True)
def peek(value: int) -> None: ...


def _explodes(data: dict[str, Any], ctx: ToolContext) -> bool:
    raise KeyError("amount")


@tool(needs_approval=_explodes)
def rule_raises(value: int) -> None: ...


@tool(needs_approval=lambda data, ctx: data["value"] > 100)
def over_100(value: int) -> None: ...


def registry() -> Registry:
    return Registry().add(plain_write, always_asks, peek, rule_raises, over_100)


def test_a_read_only_tool_cannot_need_approval() -> None:
    for rule in (True, lambda data, ctx: True):
        with pytest.raises(ToolDefinitionError, match="needs_approval"):

            @tool(read_only=True, needs_approval=rule)
            def look(key: str) -> None: ...


@pytest.mark.parametrize("rule", ["yes", 1, None, ["send"]])
def test_needs_approval_must_be_a_bool_or_a_callable(rule: Any) -> None:
    with pytest.raises(ToolDefinitionError, match="needs_approval must be a bool or a callable"):

        @tool(needs_approval=rule)
        def send(to: str) -> None: ...


def test_a_rule_that_raises_makes_the_call_wait() -> None:
    policy = ApprovalPolicy()
    assert policy.needed(spec_of(rule_raises), {"value": 1}, CTX) is True
    assert policy.waits_for(spec_of(rule_raises)) == "per call"


def test_needed_follows_the_tools_own_rule_and_dres_approval() -> None:
    nobody = ApprovalPolicy()
    assert nobody.needed(spec_of(plain_write), {"value": 1}, CTX) is False
    assert nobody.needed(spec_of(always_asks), {"value": 1}, CTX) is True
    assert nobody.needed(spec_of(over_100), {"value": 101}, CTX) is True
    assert nobody.needed(spec_of(over_100), {"value": 100}, CTX) is False

    writes = ApprovalPolicy(writes=True)
    assert writes.needed(spec_of(plain_write), {"value": 1}, CTX) is True
    assert writes.needed(spec_of(over_100), {"value": 1}, CTX) is True
    assert writes.needed(spec_of(peek), {"value": 1}, CTX) is False  # reads never wait

    named = ApprovalPolicy(names=frozenset({"plain_write"}))
    assert named.needed(spec_of(plain_write), {"value": 1}, CTX) is True
    assert named.waits_for(spec_of(plain_write)) == "yes"
    assert named.waits_for(spec_of(peek)) == "no"


@pytest.mark.parametrize(
    ("value", "rule"),
    [
        ("none", (False, frozenset())),
        ("writes", (True, frozenset())),
        ("plain_write, always_asks", (False, frozenset({"plain_write", "always_asks"}))),
        ("writes,plain_write", (True, frozenset({"plain_write"}))),
    ],
)
def test_dres_approval_is_read_as_writes_and_names(
    value: str, rule: tuple[bool, frozenset[str]]
) -> None:
    assert load_settings(approval=value).approval_rule == rule


@pytest.mark.parametrize("value", ["a b", "send_email,", "x;y"])
def test_a_malformed_dres_approval_is_a_config_error_naming_it(value: str) -> None:
    with pytest.raises(ConfigError, match="DRES_APPROVAL"):
        load_settings(approval=value)


def test_dres_approval_may_name_only_registered_write_tools() -> None:
    ApprovalPolicy(names=frozenset({"plain_write"})).check(registry())
    with pytest.raises(ConfigError, match=r"DRES_APPROVAL names unknown tools \['nope'\]"):
        ApprovalPolicy(names=frozenset({"nope", "plain_write"})).check(registry())
    with pytest.raises(ConfigError, match=r"read-only tools \['peek'\]"):
        ApprovalPolicy(names=frozenset({"peek"})).check(registry())


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"approval_webhook": "ftp://hooks.example.com"}, "DRES_APPROVAL_WEBHOOK"),
        ({"approval_webhook": "hooks.example.com/x"}, "DRES_APPROVAL_WEBHOOK"),
        ({"public_url": "dres.example.com"}, "DRES_PUBLIC_URL"),
        ({"approval_ttl_s": 0}, "DRES_APPROVAL_TTL_S"),
        ({"approval_ttl_s": -5}, "DRES_APPROVAL_TTL_S"),
    ],
)
def test_a_bad_approval_setting_is_a_config_error_naming_it(
    overrides: dict[str, Any], named: str
) -> None:
    with pytest.raises(ConfigError, match=named):
        load_settings(**overrides)
