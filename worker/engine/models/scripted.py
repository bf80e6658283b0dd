"""The scripted model of docs/models.md: deterministic answers from a JSON script.

Step k answers the k-th model call of the turn counted from the ledger (``continue``), or the
k-th call since the turn last resumed (``restart``: a model that ignores the journal note and
re-issues what it already did). ``delay_s`` and ``fail`` act only on the first attempt at a step
within the turn, so a resumed or restarted script runs through. ``chunk_chars`` and
``stream_delay_s`` stream a step's text as a provider does: small deltas at a pace (the pace,
like ``delay_s``, only on the first attempt).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from worker.base.clock import Clock
from worker.base.errors import ConfigError, ModelError
from worker.engine.models.base import ModelEvent, ModelRequest, TextDelta, ToolCall, Usage

FAILURES = {
    "gateway_timeout": ("gateway_timeout", "upstream gateway timed out (scripted)"),
    "connection_reset": ("connection_reset", "connection reset by peer (scripted)"),
    "rate_limit": ("rate_limit", "429 too many requests (scripted)"),
    "auth": ("auth", "401 invalid API key (scripted)"),
}
#: characters per streamed text delta
DELTA_CHARS = 24


class ScriptedCall(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    input: dict[str, Any] = Field(default_factory=dict)


class ScriptedUsage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    input_tokens: int = Field(0, ge=0)
    output_tokens: int = Field(0, ge=0)


class Step(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str = ""
    tool_calls: list[ScriptedCall] = Field(default_factory=list)
    delay_s: float = Field(0.0, ge=0)
    #: characters per streamed text delta
    chunk_chars: int = Field(DELTA_CHARS, ge=1)
    #: seconds between two streamed deltas, on the first attempt (a provider's pace: a time limit
    #: may cut the stream)
    stream_delay_s: float = Field(0.0, ge=0)
    fail: Literal["gateway_timeout", "connection_reset", "rate_limit", "auth"] | None = None
    #: what the step's call reports as spent (docs/models.md)
    usage: ScriptedUsage | None = None


class Script(BaseModel):
    model_config = ConfigDict(extra="forbid")
    steps: list[Step] = Field(min_length=1)
    on_resume: Literal["continue", "restart"] = "continue"

    @classmethod
    def load(cls, path: str | Path) -> Script:
        """The script at ``path``; parsed once per version of the file (every chunk asks)."""
        try:
            version = Path(path).stat().st_mtime_ns
        except FileNotFoundError:
            raise ConfigError(f"scripted model: no script file {str(path)!r}") from None
        return _load(str(path), version)


@lru_cache(maxsize=64)
def _load(path: str, version: int) -> Script:
    try:
        return Script.model_validate(json.loads(Path(path).read_text()))
    except FileNotFoundError:
        raise ConfigError(f"scripted model: no script file {path!r}") from None
    except (json.JSONDecodeError, ValidationError) as e:
        raise ConfigError(f"scripted model: {path}: {e}".splitlines()[0]) from None


class ScriptedModel:
    def __init__(self, script: Script, clock: Clock, *, name: str = "scripted") -> None:
        self.script = script
        self.clock = clock
        self.name = name

    def stream(self, request: ModelRequest) -> Iterator[ModelEvent]:
        restart = self.script.on_resume == "restart"
        index = request.resume_step if restart else request.step
        if index >= len(self.script.steps):
            yield TextDelta("(the script has no more steps)")
            return
        step = self.script.steps[index]
        first_attempt = not any(
            (resume_step if restart else turn_step) == index
            for turn_step, resume_step in request.prior_attempts
        )
        if first_attempt and step.delay_s:
            self.clock.sleep(step.delay_s)
        if first_attempt and step.fail:
            raise ModelError(*FAILURES[step.fail])
        size = step.chunk_chars
        for start in range(0, len(step.text), size):
            if start and first_attempt and step.stream_delay_s:
                self.clock.sleep(step.stream_delay_s)
            yield TextDelta(step.text[start : start + size])
        for call in step.tool_calls:
            yield ToolCall(call.name, call.input)
        if step.usage is not None:
            yield Usage(step.usage.input_tokens, step.usage.output_tokens)
