"""Models: the streaming protocol, the scripted model, and the provider adapters."""

from __future__ import annotations

from importlib import resources

from worker.clock import Clock
from worker.errors import ConfigError
from worker.models.base import ChatModel, ModelRequest
from worker.models.scripted import Script, ScriptedModel

__all__ = ["ChatModel", "ModelRequest", "Models", "make_model"]

#: spec kinds served by a provider SDK adapter
PROVIDERS = frozenset({"anthropic", "openai"})


def demo_script_path() -> str:
    return str(resources.files("worker").joinpath("scripts", "demo.json"))


def make_model(spec: str | None, clock: Clock) -> ChatModel:
    """Build the model a spec names: ``scripted:PATH``, ``anthropic:MODEL``, ``openai:MODEL``."""
    spec = spec or f"scripted:{demo_script_path()}"
    kind, _, arg = spec.partition(":")
    if kind == "scripted":
        return ScriptedModel(Script.load(arg or demo_script_path()), clock, name=spec)
    if kind in PROVIDERS:
        if not arg:
            raise ConfigError(f"model spec {spec!r}: name the model, e.g. {kind}:MODEL")
        from worker.models import providers

        return providers.make(kind, arg)
    raise ConfigError(
        f"model spec {spec!r}: expected scripted:PATH, anthropic:MODEL or openai:MODEL"
    )


class Models:
    """A process's models. A provider adapter holds its SDK client and with it the client's
    connection pool: one per spec for the life of the process, so a turn's next chunk calls the
    model over a connection already open, not a new TLS handshake. A scripted model is made per
    run: it sleeps on the run's own (cancellable) clock."""

    def __init__(self) -> None:
        self._adapters: dict[str, ChatModel] = {}

    def get(self, spec: str, clock: Clock) -> ChatModel:
        if spec.partition(":")[0] not in PROVIDERS:
            return make_model(spec, clock)
        model = self._adapters.get(spec)
        if model is None:
            model = self._adapters[spec] = make_model(spec, clock)
        return model
