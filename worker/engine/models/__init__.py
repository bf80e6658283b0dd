"""Models: the streaming protocol, the scripted model, and the provider adapters."""

from __future__ import annotations

import importlib
from collections import OrderedDict
from importlib import resources

from worker.base.clock import Clock
from worker.base.errors import ConfigError
from worker.engine.models import providers
from worker.engine.models.base import ChatModel, ModelRequest
from worker.engine.models.scripted import Script, ScriptedModel

__all__ = ["ChatModel", "ModelRequest", "Models", "make_model", "preload_sdks"]

#: spec kinds served by a provider SDK adapter (``providers.ADAPTERS``)
PROVIDERS = frozenset(providers.ADAPTERS)
#: provider adapters (SDK clients) a process keeps
DEFAULT_MAX_ADAPTERS = 8


def demo_script_path() -> str:
    """The demo's script, what DRES_MODEL's default plays (docs/configuration.md): beside the demo's
    tools at the package's root, on no floor."""
    return str(resources.files("worker").joinpath("demo_script.json"))


def make_model(spec: str | None, clock: Clock) -> ChatModel:
    """Build the model a spec names: ``scripted:PATH``, ``anthropic:MODEL``, ``openai:MODEL``."""
    spec = spec or f"scripted:{demo_script_path()}"
    kind, _, arg = spec.partition(":")
    if kind == "scripted":
        return ScriptedModel(Script.load(arg or demo_script_path()), clock, name=spec)
    if kind in PROVIDERS:
        if not arg:
            raise ConfigError(f"model spec {spec!r}: name the model, e.g. {kind}:MODEL")
        return providers.make(kind, arg)
    expected = ["scripted:PATH", *(f"{k}:MODEL" for k in sorted(PROVIDERS))]
    raise ConfigError(f"model spec {spec!r}: expected {providers.spelled(expected)}")


def preload_sdks(specs: list[str]) -> list[str]:
    """Import the provider SDKs ``specs`` name (those installed), in a worker's main process
    before it forks its pool: each child then starts with them, and no chunk spends its time
    limit on a first import (seconds on a loaded host). Returns the SDKs imported."""
    kinds = sorted({spec.partition(":")[0] for spec in specs} & PROVIDERS)
    loaded = []
    for kind in kinds:
        try:
            importlib.import_module(kind)
        except ImportError:
            continue  # the spec fails with a clear error when a turn names it
        loaded.append(kind)
    return loaded


class Models:
    """A process's models. A provider adapter holds its SDK client and with it the client's
    connection pool: one per spec, kept for the process's next chunks, so a turn's next chunk
    calls the model over a connection already open, not after a new TLS handshake. Turns name
    their model, so the specs kept are bounded: the least recently used adapter beyond
    ``max_adapters`` is closed. A scripted model is made per run: it sleeps on the run's own
    (cancellable) clock."""

    def __init__(self, max_adapters: int = DEFAULT_MAX_ADAPTERS) -> None:
        self.max_adapters = max_adapters
        self._adapters: OrderedDict[str, ChatModel] = OrderedDict()

    def get(self, spec: str, clock: Clock) -> ChatModel:
        if spec.partition(":")[0] not in PROVIDERS:
            return make_model(spec, clock)
        model = self._adapters.pop(spec, None) or make_model(spec, clock)
        self._adapters[spec] = model
        while len(self._adapters) > self.max_adapters:
            _, dropped = self._adapters.popitem(last=False)
            close = getattr(dropped, "close", None)
            if close is not None:
                close()
        return model
