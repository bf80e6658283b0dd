"""``DRES_LOOP``'s entries (docs/loops.md, docs/configuration.md): ``dres`` (dres's own loop),
``pydantic_ai:MODULE:ATTR`` or ``openai_agents:MODULE:ATTR`` (a framework's agent). Parsed here,
on the ground floor, so that the settings refuse a malformed one at start in every command;
``worker.engine.frameworks.loops`` loads their agents (and re-exports these names)."""

from __future__ import annotations

import re
from dataclasses import dataclass

#: dres's own agent loop
DRES = "dres"
#: the frameworks a loop may name: the package each imports, and the extra that installs it
FRAMEWORKS: dict[str, tuple[str, str]] = {
    "pydantic_ai": ("pydantic_ai", "pydantic-ai"),
    "openai_agents": ("agents", "openai-agents"),
}
#: what an entry may be, in words
FORMS = "dres, pydantic_ai:MODULE:ATTR or openai_agents:MODULE:ATTR"
_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
MODULE = re.compile(rf"^{_NAME}(\.{_NAME})*$")
ATTR = re.compile(rf"^{_NAME}$")


@dataclass(frozen=True)
class LoopSpec:
    """One entry of ``DRES_LOOP``: ``dres``, or a framework's agent at ``module``'s ``attr``."""

    framework: str  # "dres" | "pydantic_ai" | "openai_agents"
    module: str = ""
    attr: str = ""

    def __str__(self) -> str:
        """The entry's text, as ``DRES_LOOP`` lists it and a turn's ``loop`` names it."""
        if self.framework == DRES:
            return DRES
        return f"{self.framework}:{self.module}:{self.attr}"


def loop_entries(value: str) -> tuple[LoopSpec, ...]:
    """``DRES_LOOP``'s entries in order (the first is the default); a ``ValueError`` naming the
    first bad one (not prefixed with the variable: the settings add it)."""
    specs: list[LoopSpec] = []
    for entry in (part.strip() for part in value.split(",")):
        if not entry:
            continue
        spec = _entry(entry)
        if spec in specs:
            raise ValueError(f"{entry!r} is listed twice")
        specs.append(spec)
    if not specs:
        raise ValueError(f"lists no loop: name one of {FORMS}")
    return tuple(specs)


def parse_loops(value: str) -> tuple[LoopSpec, ...]:
    """``DRES_LOOP``'s entries, comma-separated, the first the default; a bad one is a
    ``ValueError`` naming it: ``DRES_LOOP: 'x' is not dres, pydantic_ai:MODULE:ATTR or …``."""
    try:
        return loop_entries(value)
    except ValueError as e:
        raise ValueError(f"DRES_LOOP: {e}") from None


def _entry(entry: str) -> LoopSpec:
    if entry == DRES:
        return LoopSpec(DRES)
    framework, _, rest = entry.partition(":")
    module, _, attr = rest.partition(":")
    if framework not in FRAMEWORKS or not MODULE.match(module) or not ATTR.match(attr):
        raise ValueError(f"{entry!r} is not {FORMS}")
    return LoopSpec(framework, module, attr)


__all__ = ["DRES", "FORMS", "FRAMEWORKS", "LoopSpec", "loop_entries", "parse_loops"]
