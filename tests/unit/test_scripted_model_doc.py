"""docs/models.md's scripted model agrees with its parser (``worker.engine.models.scripted``):
its tables name every field of a script and of a step, and no other; the section names every
field of a tool call and of ``usage``, every ``fail`` kind and every ``on_resume`` choice. A
guard feeds the comparison a made-up field to prove it sees one."""

from __future__ import annotations

import re
from typing import Any, get_args

from pydantic import BaseModel

from rigs import ROOT
from worker.engine.models.scripted import Script, ScriptedCall, ScriptedUsage, Step

#: a row of the section's tables: | `field` | default | what |
FIELD_ROW = re.compile(r"^\| `([a-z_]+)` \| [^|]+ \| .+ \|$")


def section() -> str:
    text = (ROOT / "docs" / "models.md").read_text(encoding="utf-8")
    start = text.index("## The scripted model")
    return text[start : text.index("\n## ", start + 1)]


def documented_fields(doc: str) -> set[str]:
    return {m.group(1) for line in doc.splitlines() if (m := FIELD_ROW.match(line))}


def fields(*models: type[BaseModel]) -> set[str]:
    return {name for model in models for name in model.model_fields}


def words(annotation: Any) -> set[str]:
    """The values of an optional ``Literal[...]`` field (``Literal[...] | None``)."""
    literal, *_ = get_args(annotation)
    return set(get_args(literal))


def differences(documented: set[str], parsed: set[str]) -> list[str]:
    return [f"not in docs/models.md: {n}" for n in sorted(parsed - documented)] + [
        f"documented, not parsed: {n}" for n in sorted(documented - parsed)
    ]


def test_models_md_tables_name_every_field_of_a_script_and_a_step_and_no_other() -> None:
    assert differences(documented_fields(section()), fields(Script, Step)) == []


def test_models_md_names_every_call_and_usage_field_fail_kind_and_on_resume_choice() -> None:
    doc = section()
    named = {
        *fields(ScriptedCall, ScriptedUsage),
        *words(Step.model_fields["fail"].annotation),
        *get_args(Script.model_fields["on_resume"].annotation),
    }
    assert {"name", "input_tokens", "gateway_timeout", "restart"} <= named
    assert sorted(name for name in named if f"`{name}`" not in doc and f'"{name}"' not in doc) == []


def test_the_field_check_sees_a_made_up_field() -> None:
    assert differences(documented_fields(section()), fields(Script, Step) | {"made_up"}) == [
        "not in docs/models.md: made_up"
    ]
