"""The ``@tool`` decorator and the registry of tools (CONTRACT §4): DRES_TOOLS's Python tools,
and the tools from elsewhere (DRES_MCP_SERVERS, DRES_OPENAPI) as the same ``ToolSpec``.

A Python tool's input schema comes from its signature: every parameter but a keyword ``ctx``
becomes a field of a pydantic model (unknown fields forbidden). A tool from elsewhere declares a
JSON schema instead (``json_schema``), checked with ``jsonschema``. Either way a model's call with
invalid input is rejected with the field named before anything runs, and nothing below the
registry asks where a tool came from (``source`` is for ``dres tools`` only).
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
from collections.abc import Callable, Coroutine, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypeVar, overload

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from worker.base.errors import ToolDefinitionError
from worker.base.settings import AgentApp, Settings
from worker.engine.tools.context import Reconciliation, ToolContext
from worker.engine.tools.schema_input import SchemaInput

#: attribute under which ``@tool`` leaves a function's spec
SPEC_ATTR = "__dres_tool__"

Reconcile = Callable[[dict[str, Any], ToolContext], Reconciliation]
#: whether a call waits for a person: ``True``, or decided per call from its input and context
NeedsApproval = bool | Callable[[dict[str, Any], ToolContext], bool]


@dataclass(frozen=True, eq=False)
class ToolSpec:
    name: str
    fn: Callable[..., Any]
    description: str
    input_model: type[BaseModel] = BaseModel
    read_only: bool = False
    #: input fields that identify a write's side effect (CONTRACT §7.4)
    identity: tuple[str, ...] = ()
    #: the tool hands ``ctx.idempotency_key`` to its provider, so a retry is safe
    idempotent: bool = False
    reconcile: Reconcile | None = None
    #: the call waits for a person's decision before it runs (CONTRACT §7.14)
    needs_approval: NeedsApproval = False
    wants_ctx: bool = False
    is_async: bool = False
    #: a tool from elsewhere: its declared input schema, checked with ``jsonschema``; ``fn`` is
    #: then called as ``fn(input_dict, ctx)``. None: a Python tool (``input_model``)
    json_schema: dict[str, Any] | None = None
    #: where the tool comes from: ``python``, ``mcp NAME`` or ``openapi NAME`` (``dres tools``)
    source: str = "python"

    @cached_property
    def schema(self) -> dict[str, Any]:
        """The input's JSON schema (built once: every chunk hands it to the model)."""
        if self.json_schema is not None:
            return self.json_schema
        return self.input_model.model_json_schema()

    def input_schema(self) -> dict[str, Any]:
        return self.schema

    @cached_property
    def _checker(self) -> SchemaInput:
        assert self.json_schema is not None
        return SchemaInput(self.json_schema)

    def check_input(self, raw: Any) -> tuple[Any, Any] | str:
        """The call's input as the tool is invoked with it and its JSON form (what is recorded
        and signed), or what is wrong with it, the field named (``where: why``)."""
        if self.json_schema is not None:
            return self._checker.check(raw)
        try:
            arguments = self.input_model.model_validate(raw)
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "input"
            return f"{where}: {first['msg']}"
        return arguments, arguments.model_dump(mode="json")

    def invoke(self, arguments: Any, ctx: ToolContext) -> Any:
        if self.json_schema is not None:
            return self.fn(arguments, ctx)
        kwargs = {name: getattr(arguments, name) for name in type(arguments).model_fields}
        if self.wants_ctx:
            kwargs["ctx"] = ctx
        if self.is_async:
            return run_coroutine(self.fn(**kwargs))
        return self.fn(**kwargs)


def run_coroutine(coro: Coroutine[Any, Any, Any]) -> Any:
    """An async tool's coroutine run to its end: ``asyncio.run`` in this thread, or, when this
    thread already runs an event loop (a host embedding dres), in a helper thread of its own."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="dres-async-tool") as pool:
        return pool.submit(asyncio.run, coro).result()


def _input_model(fn: Callable[..., Any], name: str) -> tuple[type[BaseModel], bool]:
    fields: dict[str, Any] = {}
    wants_ctx = False
    for param in inspect.signature(fn).parameters.values():
        if param.name == "ctx":
            wants_ctx = True
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ToolDefinitionError(f"tool {name}: *args/**kwargs cannot form an input schema")
        annotation = Any if param.annotation is param.empty else param.annotation
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (annotation, default)
    model = create_model(f"{name}_input", __config__=ConfigDict(extra="forbid"), **fields)
    return model, wants_ctx


F = TypeVar("F", bound=Callable[..., Any])


@overload
def tool(fn: F) -> F: ...


@overload
def tool(
    fn: None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    read_only: bool = False,
    identity: Iterable[str] | None = None,
    idempotent: bool = False,
    reconcile: Reconcile | None = None,
    needs_approval: NeedsApproval = False,
) -> Callable[[F], F]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    read_only: bool = False,
    identity: Iterable[str] | None = None,
    idempotent: bool = False,
    reconcile: Reconcile | None = None,
    needs_approval: NeedsApproval = False,
) -> Any:
    """Declare a tool. ``@tool`` or ``@tool(read_only=True)``, ``@tool(identity=[...])``, …"""

    def decorate(func: F) -> F:
        tool_name = name or func.__name__
        model, wants_ctx = _input_model(func, tool_name)
        ident = tuple(identity or ())
        unknown = [f for f in ident if f not in model.model_fields]
        if unknown:
            raise ToolDefinitionError(f"tool {tool_name}: identity names unknown fields {unknown}")
        if read_only and (ident or idempotent or reconcile or needs_approval is not False):
            raise ToolDefinitionError(
                f"tool {tool_name}: identity, idempotent, reconcile and needs_approval are for "
                "write tools (a read-only tool never waits for approval)"
            )
        if not (isinstance(needs_approval, bool) or callable(needs_approval)):
            raise ToolDefinitionError(
                f"tool {tool_name}: needs_approval must be a bool or a callable "
                f"(input, ctx) -> bool, not {type(needs_approval).__name__}"
            )
        spec = ToolSpec(
            name=tool_name,
            fn=func,
            description=description or inspect.getdoc(func) or tool_name,
            input_model=model,
            read_only=read_only,
            identity=ident,
            idempotent=idempotent,
            reconcile=reconcile,
            needs_approval=needs_approval,
            wants_ctx=wants_ctx,
            is_async=inspect.iscoroutinefunction(func),
        )
        setattr(func, SPEC_ATTR, spec)
        return func

    return decorate(fn) if fn is not None else decorate


@dataclass
class Registry:
    tools: dict[str, ToolSpec] = field(default_factory=dict)

    def add(self, *functions: Callable[..., Any]) -> Registry:
        for func in functions:
            spec = getattr(func, SPEC_ATTR, None)
            if not isinstance(spec, ToolSpec):
                raise ToolDefinitionError(f"{func!r} is not decorated with @tool")
            self.add_specs(spec)
        return self

    def add_specs(self, *specs: ToolSpec) -> Registry:
        """Register tools built elsewhere (a tool source's) beside the ``@tool`` functions."""
        for spec in specs:
            existing = self.tools.get(spec.name)
            if existing is not None and existing.fn is not spec.fn:
                raise ToolDefinitionError(
                    f"two tools are named {spec.name!r} ({existing.source}, {spec.source})"
                )
            self.tools[spec.name] = spec
        return self

    @classmethod
    def from_modules(
        cls, modules: Iterable[str], *, agents: Mapping[str, AgentApp] | None = None
    ) -> Registry:
        """Import each module and register its ``@tool`` functions (DRES_TOOLS), and the
        built-ins: ``call_agent`` when ``agents`` (DRES_AGENTS's apps) names an app.
        """
        from worker.engine.tools.agents import agent_tools  # it builds on this module's ``tool``

        registry = cls().add(*agent_tools(agents or {}))
        for module_name in modules:
            try:
                module = importlib.import_module(module_name)
            except ImportError as e:
                raise ToolDefinitionError(f"DRES_TOOLS: cannot import {module_name!r}: {e}") from e
            found = [
                v
                for v in vars(module).values()
                if isinstance(getattr(v, SPEC_ATTR, None), ToolSpec)
            ]
            if not found:
                raise ToolDefinitionError(f"DRES_TOOLS: module {module_name!r} defines no @tool")
            registry.add(*found)
        return registry

    @classmethod
    def from_settings(cls, settings: Settings) -> Registry:
        """Every tool the settings name: DRES_TOOLS's and DRES_AGENTS's (``from_modules``), and
        the tools from elsewhere, DRES_MCP_SERVERS's servers and DRES_OPENAPI's APIs, each listed
        now: one that cannot be reached or read raises ``ConfigError`` naming it.

        A source's client is imported only when the settings name one of its kind: the MCP SDK
        alone took 0.85 s of every worker's and API's start, and most deployments list none."""
        registry = cls.from_modules(settings.tool_modules, agents=settings.agent_apps)
        if settings.mcp_server_entries:
            from worker.engine.tools.sources.mcp import mcp_tools

            registry.add_specs(*mcp_tools(settings.mcp_server_entries))
        if settings.openapi_entries:
            from worker.engine.tools.sources.openapi import openapi_tools

            registry.add_specs(*openapi_tools(settings.openapi_entries))
        return registry

    def get(self, name: str) -> ToolSpec | None:
        return self.tools.get(name)

    def names(self) -> list[str]:
        return sorted(self.tools)

    def read_only_names(self) -> list[str]:
        return sorted(n for n, spec in self.tools.items() if spec.read_only)

    def schemas(self) -> Mapping[str, ToolSpec]:
        return dict(sorted(self.tools.items()))
