"""Scripted-model scripts (docs/models.md): the one writer of their files, and the steps they
hold."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from itertools import count
from pathlib import Path
from typing import Any

#: ``script(steps, on_resume="continue")``: writes a script file, returns its model spec
Script = Callable[..., str]

#: the inputs of the write tools the tests' turns call
EMAIL = {"to": "a@x.io", "subject": "Hi", "body": "hello"}
TICKET = {"title": "Printer on fire"}


def write_script(
    path: Path, steps: Sequence[Mapping[str, Any]], on_resume: str = "continue"
) -> str:
    """Write a scripted-model file at ``path``; returns its model spec ``scripted:PATH``."""
    path.write_text(json.dumps({"steps": list(steps), "on_resume": on_resume}))
    return f"scripted:{path}"


def script_writer(directory: Path) -> Script:
    """``write(steps, on_resume="continue")`` writes ``script-N.json`` (N = 1, 2, ...) in
    ``directory``; its model spec."""
    numbers = count(1)

    def write(steps: Sequence[Mapping[str, Any]], on_resume: str = "continue") -> str:
        return write_script(directory / f"script-{next(numbers)}.json", steps, on_resume)

    return write


# -- steps --------------------------------------------------------------------------------------

DONE: dict[str, Any] = {"text": "Done."}


def send(to: str, subject: str) -> dict[str, Any]:
    """A step that sends one email."""
    mail = {"to": to, "subject": subject, "body": "hello"}
    return {"text": f"Emailing {to}.", "tool_calls": [{"name": "send_email", "input": mail}]}


def think(delay_s: float) -> dict[str, Any]:
    """A step that takes ``delay_s`` (first attempt only), then reads the outbox."""
    return {"delay_s": delay_s, "text": "Thinking.", "tool_calls": [{"name": "list_outbox"}]}


def slow_write(label: str) -> dict[str, Any]:
    """A step calling ``sample_tools.slow_write``: its side effect, then a second of work."""
    return {"tool_calls": [{"name": "slow_write", "input": {"label": label}}]}


def outside_write(label: str, seconds: float = 0.0) -> dict[str, Any]:
    """A step calling ``sample_tools.outside_write``: its effect lands in a file outside the
    ledger's Redis at once, then ``seconds`` of work (a store fault can strike meanwhile)."""
    call = {"name": "outside_write", "input": {"label": label, "seconds": seconds}}
    return {"tool_calls": [call]}


def busy(steps: int, delay_s: float = 0.3) -> list[dict[str, Any]]:
    """A long turn: ``steps`` model calls each thinking ``delay_s`` and then reading the outbox."""
    return [think(delay_s)] * steps + [DONE]


#: a turn of three model calls with text and a read and a write; the second call's first attempt
#: takes 1 s, twice the 0.5 s soft limit, so the turn always spans at least two chunks
MULTI_CHUNK: list[dict[str, Any]] = [
    {
        "text": "Let me look at the outbox before sending anything.",
        "tool_calls": [{"name": "list_outbox"}],
    },
    {
        "delay_s": 1.0,
        "text": "Sending the email now.",
        "tool_calls": [{"name": "send_email", "input": EMAIL}],
    },
    {"text": "Done: the email is sent."},
]
