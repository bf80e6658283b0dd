"""The registry of tools (docs/tools.md): every tool the settings name, from every source, as the
same ``ToolSpec``. Where they come from is ``worker.engine.tools.sources``' business: the
registry asks each source in ``SOURCES`` and names none.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from worker.base.errors import ToolDefinitionError
from worker.base.settings import Settings
from worker.engine.tools import sources
from worker.engine.tools.spec import ToolSpec, specs_of


@dataclass
class Registry:
    tools: dict[str, ToolSpec] = field(default_factory=dict)

    def add(self, *functions: Callable[..., Any]) -> Registry:
        """Register ``@tool`` functions."""
        return self.add_specs(*specs_of(functions))

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
    def from_settings(
        cls, settings: Settings, tool_sources: Iterable[sources.ToolSource[Any]] | None = None
    ) -> Registry:
        """Every tool the settings name, each source's (``sources.SOURCES``) listed now: one
        that cannot be imported, reached or read raises naming it."""
        registry = cls()
        for source in sources.SOURCES if tool_sources is None else tool_sources:
            registry.add_specs(*source.tools(source.parse(settings)))
        return registry

    def with_client_tools(self, specs: Iterable[ToolSpec]) -> Registry:
        """This registry and a turn's client tools (its request's), for that turn's runs. A
        registered tool keeps its name: a client tool named as one is left out."""
        fresh = [spec for spec in specs if spec.name not in self.tools]
        return Registry({**self.tools, **{spec.name: spec for spec in fresh}}) if fresh else self

    def get(self, name: str) -> ToolSpec | None:
        return self.tools.get(name)

    def names(self) -> list[str]:
        return sorted(self.tools)

    def read_only_names(self) -> list[str]:
        return sorted(n for n, spec in self.tools.items() if spec.read_only)

    def schemas(self) -> Mapping[str, ToolSpec]:
        return dict(sorted(self.tools.items()))
