"""``DRES_LOOP``'s entries (docs/loops.md): parsed (``parse_loops``, on the ground floor so the
settings refuse a malformed one in every command), looked for without importing anything
(``locate``: the API's start, which needs no framework), and their agents loaded once per process
(``load``: a worker's start, then every chunk). What stops a loop is one line, ``LoopUnavailable``:
its framework not installed, its module not importable (a syntax error's file and line), its
attribute missing or not the framework's agent.
"""

from __future__ import annotations

import importlib
import importlib.util
import threading
from collections.abc import Iterable, Sequence

from worker.base.errors import ConfigError, LoopUnavailable
from worker.base.imports import import_named
from worker.base.loop_specs import DRES, FRAMEWORKS, LoopSpec, parse_loops
from worker.engine.frameworks.base import Adapter

#: each framework's agent class (its package's attribute) and its adapter (module, class)
AGENT_CLASS = {"pydantic_ai": "a pydantic_ai.Agent", "openai_agents": "an agents.Agent"}
ADAPTERS = {
    "pydantic_ai": ("worker.engine.frameworks.pydantic_ai_loop", "PydanticAiAdapter"),
    "openai_agents": ("worker.engine.frameworks.openai_agents_loop", "AgentsSdkAdapter"),
}

_loaded: dict[LoopSpec, Adapter] = {}
_loading = threading.Lock()


def load(spec: LoopSpec) -> Adapter:
    """The adapter of ``spec``'s agent, made once per process (the same object every chunk);
    ``LoopUnavailable`` (one line) when it cannot be. ``spec`` names a framework's agent:
    dres's own loop has no adapter."""
    if spec.framework == DRES:
        raise ValueError("DRES_LOOP: dres is dres's own loop, which no adapter runs")
    with _loading:
        adapter = _loaded.get(spec)
        if adapter is None:
            adapter = _loaded[spec] = _adapter(spec)
    return adapter


def load_listed(specs: Iterable[LoopSpec]) -> list[Adapter]:
    """Every framework loop of ``specs`` loaded (a worker's start): the first that cannot be
    raises ``LoopUnavailable``."""
    return [load(spec) for spec in specs if spec.framework != DRES]


def adapter_for(loops: Sequence[LoopSpec], loop: str | None) -> Adapter | None:
    """The adapter that runs a turn whose ``turn_started`` names ``loop`` (None: ``loops``'s
    first, the default), loaded once per process; None for dres's own loop. A loop this process
    does not list (its DRES_LOOP is not the API's) raises ``LoopUnavailable``."""
    spec = loops[0] if loop is None else next((s for s in loops if str(s) == loop), None)
    if spec is None:
        listed = ", ".join(str(s) for s in loops)
        raise LoopUnavailable(f"DRES_LOOP: the turn's loop {loop!r} is not listed here: {listed}")
    return None if spec.framework == DRES else load(spec)


def locate(spec: LoopSpec) -> None:
    """``spec``'s framework installed and its module found, importing neither (the API's start:
    it accepts a turn's ``loop`` by name and runs no agent); else ``LoopUnavailable``. A module
    that is found but cannot be imported is the worker's to say, as it loads it."""
    if spec.framework == DRES:
        return
    package, _ = FRAMEWORKS[spec.framework]
    if not _findable(package):
        raise _not_installed(spec)
    if not _findable(spec.module):
        raise LoopUnavailable(
            f"DRES_LOOP: {spec}: cannot import {spec.module!r}: No module named {spec.module!r}"
        )


def _adapter(spec: LoopSpec) -> Adapter:
    package, _ = FRAMEWORKS[spec.framework]
    try:
        framework = importlib.import_module(package)
    except ImportError as e:
        raise _not_installed(spec, e) from None
    module = import_named(spec.module, lambda line: LoopUnavailable(f"DRES_LOOP: {spec}: {line}"))
    if not hasattr(module, spec.attr):
        raise LoopUnavailable(
            f"DRES_LOOP: {spec}: module {spec.module!r} has no attribute {spec.attr!r}"
        )
    agent = getattr(module, spec.attr)
    if not isinstance(agent, framework.Agent):
        raise LoopUnavailable(
            f"DRES_LOOP: {spec}: {spec.module}.{spec.attr} is not "
            f"{AGENT_CLASS[spec.framework]} (its type: {_kind(agent)})"
        )
    adapter_module, adapter_class = ADAPTERS[spec.framework]
    made = getattr(importlib.import_module(adapter_module), adapter_class)
    try:
        adapter: Adapter = made(agent)
    except LoopUnavailable:
        raise
    except (ConfigError, ValueError, TypeError) as e:
        # an agent the adapter cannot run (docs/loops.md, "Limits"): its first line
        said = str(e).strip().splitlines()
        raise LoopUnavailable(
            f"DRES_LOOP: {spec}: {said[0] if said else type(e).__name__}"
        ) from None
    return adapter


def _kind(value: object) -> str:
    kind = type(value)
    return (
        kind.__qualname__
        if kind.__module__ == "builtins"
        else f"{kind.__module__}.{kind.__qualname__}"
    )


def _findable(module: str) -> bool:
    """Whether ``module`` can be found, importing only the packages above it."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a package above it is missing, or was set to None
        return False


def _not_installed(spec: LoopSpec, error: ImportError | None = None) -> LoopUnavailable:
    package, extra = FRAMEWORKS[spec.framework]
    why = ""
    if error is not None and error.name not in {package, None}:
        why = f" (importing it failed: {error})"  # installed, but something it needs is not
    return LoopUnavailable(f"DRES_LOOP: {spec} needs {extra}{why}: pip install 'dres[{extra}]'")


__all__ = [
    "LoopSpec",
    "LoopUnavailable",
    "adapter_for",
    "load",
    "load_listed",
    "locate",
    "parse_loops",
]
