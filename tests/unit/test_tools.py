"""The @tool decorator, the registry and ToolContext (docs/tools.md)."""

from __future__ import annotations

import ast
import asyncio
import importlib
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from worker.base.errors import ToolDefinitionError
from worker.base.settings import Settings, load_settings
from worker.engine.tools import Registry, ToolContext, sources, tool
from worker.engine.tools import registry as registry_module
from worker.engine.tools.context import idempotency_key
from worker.engine.tools.sources.python import module_tools
from worker.engine.tools.spec import SPEC_ATTR, ToolSpec, run_coroutine, specs_of


def spec_of(fn: Any) -> ToolSpec:
    spec = getattr(fn, SPEC_ATTR)
    assert isinstance(spec, ToolSpec)
    return spec


def test_the_input_schema_comes_from_the_signature_and_ctx_is_not_part_of_it() -> None:
    @tool(identity=["to"])
    def notify(to: str, count: int = 1, *, ctx: ToolContext) -> dict[str, Any]:
        """Notify someone."""
        return {}

    spec = spec_of(notify)
    schema = spec.input_schema()
    assert set(schema["properties"]) == {"to", "count"} and schema["required"] == ["to"]
    assert spec.wants_ctx and not spec.read_only and spec.identity == ("to",)
    assert spec.description == "Notify someone."


def test_input_validation_rejects_wrong_types_missing_and_unknown_fields() -> None:
    @tool(read_only=True)
    def lookup(key: str, limit: int = 10) -> dict[str, Any]:
        return {}

    model = spec_of(lookup).input_model
    assert model.model_validate({"key": "a"}).limit == 10
    for bad in ({"limit": 3}, {"key": "a", "limit": "many"}, {"key": "a", "extra": 1}):
        with pytest.raises(ValidationError):
            model.model_validate(bad)


def test_identity_must_name_input_fields() -> None:
    with pytest.raises(ToolDefinitionError, match="unknown fields"):

        @tool(identity=["recipient"])
        def send(to: str) -> None: ...


def test_a_read_only_tool_cannot_declare_write_options() -> None:
    with pytest.raises(ToolDefinitionError, match="write tools"):

        @tool(read_only=True, idempotent=True)
        def peek(key: str) -> None: ...


def test_the_registry_loads_the_tools_of_the_dres_tools_modules() -> None:
    registry = Registry().add_specs(*module_tools(["worker.demo_tools"]))
    assert registry.names() == ["create_ticket", "get_ticket", "list_outbox", "send_email"]
    assert registry.read_only_names() == ["get_ticket", "list_outbox"]
    assert registry.tools["create_ticket"].idempotent
    assert registry.tools["send_email"].identity == ("to", "subject")


def test_an_unimportable_or_empty_tools_module_is_a_clear_error() -> None:
    with pytest.raises(ToolDefinitionError, match=r"cannot import 'no\.such\.module'"):
        module_tools(["no.such.module"])
    with pytest.raises(ToolDefinitionError, match="defines no @tool"):
        module_tools(["json"])


def test_two_tools_with_one_name_are_refused() -> None:
    @tool(name="dup")
    def one() -> None: ...

    @tool(name="dup")
    def two() -> None: ...

    with pytest.raises(ToolDefinitionError, match="two tools are named 'dup'"):
        Registry().add(one, two)


def test_the_idempotency_key_depends_on_turn_tool_signature_and_occurrence_only() -> None:
    key = idempotency_key("t1", "charge", "abc", 0)
    assert key == idempotency_key("t1", "charge", "abc", 0)
    others = {
        idempotency_key("t2", "charge", "abc", 0),
        idempotency_key("t1", "refund", "abc", 0),
        idempotency_key("t1", "charge", "abd", 0),
        idempotency_key("t1", "charge", "abc", 1),
    }
    assert key not in others and len(others) == 4


def test_an_async_tool_runs_also_where_an_event_loop_is_already_running() -> None:
    """A host that calls dres from inside a running loop (as Playwright's sync API leaves one)
    still gets the tool's result, not asyncio.run's RuntimeError."""

    async def lookup(key: str) -> dict[str, str]:
        await asyncio.sleep(0)
        return {"key": key}

    async def inside_a_loop() -> object:
        return run_coroutine(lookup("k"))

    assert asyncio.run(inside_a_loop()) == {"key": "k"}
    assert run_coroutine(lookup("j")) == {"key": "j"}


def test_a_tool_source_added_to_the_list_registers_its_tools_with_no_other_edit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    @tool(read_only=True)
    def echo(text: str) -> str:
        return text

    class Fake:
        def parse(self, settings: Settings) -> list[str]:
            return [settings.tools]

        def tools(self, parsed: list[str]) -> list[ToolSpec]:
            return specs_of([echo]) if parsed == ["worker.demo_tools"] else []

    monkeypatch.setattr(sources, "SOURCES", [*sources.SOURCES, Fake()])
    settings = load_settings(tools="worker.demo_tools", agents="{}", mcp_servers="{}", openapi="{}")
    registry = Registry.from_settings(settings)
    assert registry.names() == ["create_ticket", "echo", "get_ticket", "list_outbox", "send_email"]
    assert registry.tools["echo"].read_only


def test_the_registry_names_no_source_and_every_listed_adapter_is_found() -> None:
    """The registry imports the list of sources, never a source's module; each ``Lazy`` entry's
    ``module:function`` names a function that exists (an adapter is imported only when used)."""
    tree = ast.parse(Path(registry_module.__file__ or "").read_text())
    imported = [
        f"{node.module}.{alias.name}"
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    ]
    assert "worker.engine.tools.sources" in imported
    assert not [name for name in imported if name.startswith("worker.engine.tools.sources.")]
    for source in sources.SOURCES:
        assert isinstance(source, sources.Lazy)
        module, _, name = source.adapter.partition(":")
        assert callable(getattr(importlib.import_module(module), name))
        assert source.setting in Settings.model_fields
