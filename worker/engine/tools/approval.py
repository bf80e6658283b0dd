"""Which calls wait for a person's decision (docs/semantics.md): ``DRES_APPROVAL`` and a tool's own
``needs_approval``. Read-only tools never wait. A ``needs_approval`` callable that raises makes the
call wait: a rule that cannot answer never lets a write through unasked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import structlog

from worker.base.errors import ConfigError
from worker.base.settings import Settings
from worker.engine.tools.context import ToolContext
from worker.engine.tools.registry import Registry
from worker.engine.tools.spec import ToolSpec

log = structlog.get_logger("dres.approval")


@dataclass(frozen=True)
class ApprovalPolicy:
    #: every write tool waits (``DRES_APPROVAL=writes``)
    writes: bool = False
    #: tools that wait, by name (``DRES_APPROVAL=a,b``)
    names: frozenset[str] = frozenset()
    #: seconds a request waits for its decision (``DRES_APPROVAL_TTL_S``)
    ttl_s: float = 86400.0

    @classmethod
    def from_settings(cls, settings: Settings) -> ApprovalPolicy:
        writes, names = settings.approval_rule
        return cls(writes, names, settings.approval_ttl_s)

    def check(self, registry: Registry) -> None:
        """DRES_APPROVAL may name only registered write tools: a typo would let writes through."""
        unknown = sorted(self.names - set(registry.names()))
        if unknown:
            known = ", ".join(registry.names())
            raise ConfigError(f"DRES_APPROVAL names unknown tools {unknown}; known tools: {known}")
        reads = sorted(n for n in self.names if (spec := registry.get(n)) and spec.read_only)
        if reads:
            raise ConfigError(
                f"DRES_APPROVAL names read-only tools {reads}: read-only tools never wait"
            )

    def needed(self, spec: ToolSpec, data: Any, ctx: ToolContext) -> bool:
        """Does this call wait for a person's decision?"""
        if spec.read_only:
            return False
        if self.writes or spec.name in self.names:
            return True
        rule = spec.needs_approval
        if not callable(rule):
            return bool(rule)
        try:
            return bool(rule(dict(data) if isinstance(data, dict) else {}, ctx))
        except Exception as e:
            # the error's type only: its message may quote the call's input
            log.warning(
                "needs_approval raised; the call waits for approval",
                tool=spec.name,
                error=type(e).__name__,
            )
            return True

    def waits_for(self, spec: ToolSpec) -> str:
        """Whether ``spec``'s calls wait, in a word (``dres tools``): yes, no or per call."""
        if spec.read_only:
            return "no"
        if self.writes or spec.name in self.names or spec.needs_approval is True:
            return "yes"
        return "per call" if callable(spec.needs_approval) else "no"
