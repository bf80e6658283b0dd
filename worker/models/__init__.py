"""Models: the streaming protocol, the scripted model, and the provider adapters."""

from __future__ import annotations

from importlib import resources

from worker.clock import Clock
from worker.errors import ConfigError
from worker.models.base import ChatModel, ModelRequest
from worker.models.scripted import Script, ScriptedModel

__all__ = ["ChatModel", "ModelRequest", "make_model"]


def demo_script_path() -> str:
    return str(resources.files("worker").joinpath("scripts", "demo.json"))


def make_model(spec: str | None, clock: Clock) -> ChatModel:
    """Build the model a spec names: ``scripted:PATH``, ``anthropic:MODEL``, ``openai:MODEL``."""
    spec = spec or f"scripted:{demo_script_path()}"
    kind, _, arg = spec.partition(":")
    if kind == "scripted":
        return ScriptedModel(Script.load(arg or demo_script_path()), clock, name=spec)
    if kind in {"anthropic", "openai"}:
        if not arg:
            raise ConfigError(f"model spec {spec!r}: name the model, e.g. {kind}:MODEL")
        from worker.models import providers

        return providers.make(kind, arg)
    raise ConfigError(
        f"model spec {spec!r}: expected scripted:PATH, anthropic:MODEL or openai:MODEL"
    )
