"""``DRES_LOOP`` (docs/loops.md): its entries parsed, the first the default, a bad one refused in
one line naming it; a framework loop's agent loaded once per process, and what stops it — its
framework not installed, its module not importable (a syntax error's file and line), its
attribute missing or not the framework's agent — one line naming the loop. The examples'
agents are the frameworks' own ``Agent``s."""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rigs import ROOT
from worker.base.errors import ConfigError, LoopUnavailable
from worker.base.settings import load_settings
from worker.engine.frameworks.base import marked_read_only
from worker.engine.frameworks.loops import (
    LoopSpec,
    adapter_for,
    load,
    load_listed,
    locate,
    parse_loops,
)

FORMS = "is not dres, pydantic_ai:MODULE:ATTR or openai_agents:MODULE:ATTR"


def test_dres_loop_lists_loops_in_order_the_first_the_default_each_written_as_listed() -> None:
    assert parse_loops("dres") == (LoopSpec("dres"),)
    specs = parse_loops(" pydantic_ai:shop.agents:orders , dres,openai_agents:desk:support ")
    assert specs == (
        LoopSpec("pydantic_ai", "shop.agents", "orders"),
        LoopSpec("dres"),
        LoopSpec("openai_agents", "desk", "support"),
    )
    assert [str(s) for s in specs] == [
        "pydantic_ai:shop.agents:orders",
        "dres",
        "openai_agents:desk:support",
    ]
    assert load_settings(loop="openai_agents:desk:support,dres").loops[0] == specs[2]
    assert load_settings().loops == (LoopSpec("dres"),)


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("Dres", f"DRES_LOOP: 'Dres' {FORMS}"),
        ("dres,langgraph:m:a", f"DRES_LOOP: 'langgraph:m:a' {FORMS}"),
        ("pydantic_ai:m", f"DRES_LOOP: 'pydantic_ai:m' {FORMS}"),
        ("pydantic_ai::a", f"DRES_LOOP: 'pydantic_ai::a' {FORMS}"),
        ("openai_agents:m:a.b", f"DRES_LOOP: 'openai_agents:m:a.b' {FORMS}"),
        ("openai_agents:my-mod:a", f"DRES_LOOP: 'openai_agents:my-mod:a' {FORMS}"),
        ("pydantic_ai:m:a:b", f"DRES_LOOP: 'pydantic_ai:m:a:b' {FORMS}"),
        ("dres, dres", "DRES_LOOP: 'dres' is listed twice"),
        (" , ", "DRES_LOOP: lists no loop"),
    ],
)
def test_a_bad_entry_is_one_line_naming_it_from_the_parser_and_the_settings(
    value: str, said: str
) -> None:
    with pytest.raises(ValueError) as parsed:
        parse_loops(value)
    with pytest.raises(ConfigError) as loaded:
        load_settings(loop=value)
    for error in (parsed.value, loaded.value):
        assert str(error).startswith(said), str(error)
        assert "\n" not in str(error)


def module_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **modules: str) -> None:
    """Modules of these names and sources, importable from here on."""
    for name, source in modules.items():
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))


def unavailable(spec: str) -> str:
    """``load``'s one line for the loop ``spec``."""
    (loop,) = parse_loops(spec)
    with pytest.raises(LoopUnavailable) as raised:
        load(loop)
    said = str(raised.value)
    assert "\n" not in said and said.startswith(f"DRES_LOOP: {spec}"), said
    return said


def test_a_loop_that_cannot_be_loaded_is_one_line_naming_it_and_what_is_wrong(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module_dir(
        tmp_path,
        monkeypatch,
        loops_bad_syntax="from pydantic_ai import Agent\n\nagent = Agent(\n",
        loops_raising="import os\n\nraise KeyError('NO_SUCH_KEY_FOR_LOOPS')\n",
        loops_not_agents="import agents\n\nagent = agents.Agent(name='a')\nnumber = 3\n",
    )
    assert unavailable("pydantic_ai:loops_bad_syntax:agent").endswith(
        f"cannot import 'loops_bad_syntax': '(' was never closed "
        f"({tmp_path / 'loops_bad_syntax.py'}, line 3)"
    )
    assert unavailable("pydantic_ai:loops_raising:agent").endswith(
        "cannot import 'loops_raising': KeyError: 'NO_SUCH_KEY_FOR_LOOPS' "
        f"({tmp_path / 'loops_raising.py'}, line 3)"
    )
    assert unavailable("openai_agents:loops_no_such_module:agent").endswith(
        "cannot import 'loops_no_such_module': No module named 'loops_no_such_module'"
    )
    assert unavailable("openai_agents:loops_not_agents:missing").endswith(
        "module 'loops_not_agents' has no attribute 'missing'"
    )
    assert unavailable("openai_agents:loops_not_agents:number").endswith(
        "loops_not_agents.number is not an agents.Agent (its type: int)"
    )
    assert unavailable("pydantic_ai:loops_not_agents:agent").endswith(
        "loops_not_agents.agent is not a pydantic_ai.Agent (its type: agents.agent.Agent)"
    )


def test_locate_finds_a_missing_module_without_importing_the_framework_or_the_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module_dir(tmp_path, monkeypatch, loops_located="raise RuntimeError('imported')\n")
    locate(LoopSpec("dres"))
    locate(LoopSpec("pydantic_ai", "loops_located", "agent"))  # found, not run
    assert "loops_located" not in sys.modules
    with pytest.raises(LoopUnavailable) as raised:
        locate(LoopSpec("pydantic_ai", "loops_nowhere.deep", "agent"))
    assert str(raised.value) == (
        "DRES_LOOP: pydantic_ai:loops_nowhere.deep:agent: cannot import 'loops_nowhere.deep': "
        "No module named 'loops_nowhere.deep'"
    )


@pytest.mark.parametrize(
    ("package", "spec", "extra"),
    [
        ("pydantic_ai", "pydantic_ai:pydantic_ai_agent:agent", "pydantic-ai"),
        ("agents", "openai_agents:openai_agents_agent:agent", "openai-agents"),
    ],
)
@pytest.mark.parametrize("check", ["load", "locate"])
def test_a_framework_that_is_not_installed_is_one_line_saying_which_extra_installs_it(
    package: str, spec: str, extra: str, check: str
) -> None:
    # a real failed import of the framework: its name set to None in sys.modules, in a process
    # of its own (this one has it imported)
    code = (
        f"import sys; sys.modules[{package!r}] = None\n"
        "from worker.engine.frameworks import loops\n"
        "from worker.base.errors import LoopUnavailable\n"
        f"(spec,) = loops.parse_loops({spec!r})\n"
        "try:\n"
        f"    loops.{check}(spec)\n"
        "except LoopUnavailable as e:\n"
        "    print(e)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT / "examples",
        env={"PYTHONPATH": f"{ROOT}:{ROOT / 'examples'}", "OPENAI_API_KEY": "sk-test"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"DRES_LOOP: {spec} needs {extra}: pip install 'dres[{extra}]'"


def test_dres_own_loop_has_no_adapter_and_load_listed_loads_only_framework_loops() -> None:
    with pytest.raises(ValueError, match="dres's own loop"):
        load(LoopSpec("dres"))
    assert load_listed(parse_loops("dres")) == []
    assert adapter_for(parse_loops("dres"), None) is None
    assert adapter_for(parse_loops("dres,pydantic_ai:m:a"), "dres") is None
    with pytest.raises(LoopUnavailable) as raised:
        adapter_for(parse_loops("dres"), "pydantic_ai:m:a")
    assert str(raised.value) == (
        "DRES_LOOP: the turn's loop 'pydantic_ai:m:a' is not listed here: dres"
    )


@pytest.fixture
def examples(monkeypatch: pytest.MonkeyPatch) -> None:
    """The examples' directory importable, and the key their OpenAI clients want at import."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.syspath_prepend(str(ROOT / "examples"))


@pytest.mark.usefixtures("examples")
def test_the_examples_are_the_frameworks_own_agents_with_a_read_only_tool_and_a_write() -> None:
    import agents
    import pydantic_ai

    pydantic_example = importlib.import_module("pydantic_ai_agent")
    assert isinstance(pydantic_example.agent, pydantic_ai.Agent)
    (toolset,) = pydantic_example.agent.toolsets  # its function tools, by name
    lookup, refund = toolset.tools["lookup_order"], toolset.tools["refund_order"]
    assert marked_read_only(lookup.function, metadata=lookup.metadata)
    assert not marked_read_only(refund.function, metadata=refund.metadata)
    assert refund.requires_approval

    agents_example = importlib.import_module("openai_agents_agent")
    assert isinstance(agents_example.agent, agents.Agent)
    tools = {tool.name: tool for tool in agents_example.agent.tools}
    assert set(tools) == {"get_ticket", "close_ticket"}
    assert marked_read_only(tools["get_ticket"])
    assert not marked_read_only(tools["close_ticket"])


@pytest.mark.usefixtures("examples")
@pytest.mark.parametrize(
    ("spec", "adapter_module", "adapter"),
    [
        (
            "pydantic_ai:pydantic_ai_agent:agent",
            "worker.engine.frameworks.pydantic_ai_loop",
            "PydanticAiAdapter",
        ),
        (
            "openai_agents:openai_agents_agent:agent",
            "worker.engine.frameworks.openai_agents_loop",
            "AgentsSdkAdapter",
        ),
    ],
)
def test_an_examples_agent_loads_into_its_frameworks_adapter_once_per_process(
    spec: str, adapter_module: str, adapter: str
) -> None:
    made = getattr(pytest.importorskip(adapter_module), adapter)
    (loop,) = parse_loops(spec)
    loaded = load(loop)
    assert isinstance(loaded, made)
    assert load(loop) is loaded
    assert load_listed(parse_loops(f"dres,{spec}")) == [loaded]
    # a turn's recorded loop: its entry's text, or None for the default (DRES_LOOP's first)
    assert adapter_for(parse_loops(f"dres,{spec}"), spec) is loaded
    assert adapter_for(parse_loops(f"{spec},dres"), None) is loaded


def test_read_only_is_public_beside_tool() -> None:
    from worker.tools import read_only, tool

    assert callable(tool)

    def lookup() -> None: ...

    assert read_only(lookup) is lookup and marked_read_only(lookup)
