"""A tool as the registry holds it (``ToolSpec``) and the ``@tool`` decorator (docs/tools.md).

A Python tool's input schema comes from its signature: every parameter but a keyword ``ctx``
becomes a field of a pydantic model (unknown fields forbidden). A tool from elsewhere declares a
JSON schema instead (``json_schema``), checked with ``jsonschema``. Either way a model's call with
invalid input is rejected with the field named before anything runs, and nothing below the
registry asks where a tool came from (``source`` is for ``dres tools`` only).

Its own module, below the registry and every tool source, so that a source builds on it without
an import circle.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Coroutine, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property
from typing import Any, TypedDict, TypeVar, Unpack, overload

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from worker.base.errors import ToolDefinitionError
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
    #: input fields that identify a write's side effect (docs/semantics.md)
    identity: tuple[str, ...] = ()
    #: the tool hands ``ctx.idempotency_key`` to its provider, so a retry is safe
    idempotent: bool = False
    reconcile: Reconcile | None = None
    #: the call waits for a person's decision before it runs (docs/semantics.md)
    needs_approval: NeedsApproval = False
    wants_ctx: bool = False
    is_async: bool = False
    #: a tool from elsewhere: its declared input schema, checked with ``jsonschema``; ``fn`` is
    #: then called as ``fn(input_dict, ctx)``. None: a Python tool (``input_model``)
    json_schema: dict[str, Any] | None = None
    #: where the tool comes from: ``python``, ``mcp NAME``, ``openapi NAME`` or ``client``
    #: (``dres tools``)
    source: str = "python"
    #: the client runs it, not the worker: a call waits for the client's answer and ``fn`` is
    #: never called (docs/tools.md, client tools)
    client: bool = False

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


class ToolOptions(TypedDict, total=False):
    """``@tool(...)``'s keywords, each optional."""

    #: the tool's name; default: the function's
    name: str | None
    #: what the model reads; default: the function's docstring
    description: str | None
    read_only: bool
    #: input fields that identify a write's side effect (docs/semantics.md)
    identity: Iterable[str] | None
    idempotent: bool
    reconcile: Reconcile | None
    needs_approval: NeedsApproval
    #: the client runs it (its body is never called): a call waits for the client's answer
    client: bool


@overload
def tool(fn: F) -> F: ...


@overload
def tool(fn: None = None, **options: Unpack[ToolOptions]) -> Callable[[F], F]: ...


def tool(fn: Callable[..., Any] | None = None, **options: Unpack[ToolOptions]) -> Any:
    """Declare a tool. ``@tool`` or ``@tool(read_only=True)``, ``@tool(identity=[...])``, …"""
    unknown = sorted(options.keys() - ToolOptions.__optional_keys__)
    if unknown:
        raise TypeError(f"tool() got unexpected keyword arguments {unknown}")

    def decorate(func: F) -> F:
        setattr(func, SPEC_ATTR, _declare(func, options))
        return func

    return decorate(fn) if fn is not None else decorate


def _declare(func: Callable[..., Any], options: ToolOptions) -> ToolSpec:
    tool_name = options.get("name") or func.__name__
    model, wants_ctx = _input_model(func, tool_name)
    ident = tuple(options.get("identity") or ())
    read_only = options.get("read_only", False)
    idempotent = options.get("idempotent", False)
    reconcile = options.get("reconcile")
    needs_approval = options.get("needs_approval", False)
    client = options.get("client", False)
    unknown = [f for f in ident if f not in model.model_fields]
    if unknown:
        raise ToolDefinitionError(f"tool {tool_name}: identity names unknown fields {unknown}")
    if read_only and (ident or idempotent or reconcile or needs_approval is not False):
        raise ToolDefinitionError(
            f"tool {tool_name}: identity, idempotent, reconcile and needs_approval are for "
            "write tools (a read-only tool never waits for approval)"
        )
    if client and (idempotent or reconcile or needs_approval is not False):
        raise ToolDefinitionError(
            f"tool {tool_name}: a client tool waits for the client's answer: idempotent, "
            "reconcile and needs_approval are for tools the worker runs"
        )
    if not (isinstance(needs_approval, bool) or callable(needs_approval)):
        raise ToolDefinitionError(
            f"tool {tool_name}: needs_approval must be a bool or a callable "
            f"(input, ctx) -> bool, not {type(needs_approval).__name__}"
        )
    return ToolSpec(
        name=tool_name,
        fn=func,
        description=options.get("description") or inspect.getdoc(func) or tool_name,
        input_model=model,
        read_only=read_only,
        identity=ident,
        idempotent=idempotent,
        reconcile=reconcile,
        needs_approval=needs_approval,
        wants_ctx=wants_ctx,
        is_async=inspect.iscoroutinefunction(func),
        client=client,
        source="client" if client else "python",
    )


def client_spec(name: str, description: str, parameters: dict[str, Any]) -> ToolSpec:
    """A tool a turn's request declares for the client to run (an AG-UI request's ``tools``):
    a write (the client's effects are unknown to dres), its input checked against its schema."""
    schema = parameters or {"type": "object", "properties": {}}
    return ToolSpec(
        name=name,
        fn=_never_called,
        description=description or name,
        json_schema=schema,
        source="client",
        client=True,
    )


def _never_called(*args: Any, **kwargs: Any) -> Any:
    raise ToolDefinitionError("a client tool is run by the client, never by the worker")


def specs_of(functions: Iterable[Callable[..., Any]]) -> list[ToolSpec]:
    """The ``ToolSpec`` each ``@tool`` function carries; a function without one raises."""
    specs = []
    for func in functions:
        spec = getattr(func, SPEC_ATTR, None)
        if not isinstance(spec, ToolSpec):
            raise ToolDefinitionError(f"{func!r} is not decorated with @tool")
        specs.append(spec)
    return specs


def is_tool(value: object) -> bool:
    """Whether ``value`` is a ``@tool`` function."""
    return isinstance(getattr(value, SPEC_ATTR, None), ToolSpec)
