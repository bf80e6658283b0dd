"""The floors of the house and the arrows allowed between them (STYLE: shape; docs/architecture.md).

``tasks -> worker -> ledger``, never back; inside ``worker``, each floor imports only the floors
below it: ``base`` <- ``engine`` <- ``lifecycle`` <- ``edges`` <- ``dev``. One walk of every
module's imports checks every rule, so a reversed arrow fails here.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STDLIB = set(sys.stdlib_module_names) | {"__future__"}

#: the parts of dres a module may import, by where it lives (the longest matching prefix wins)
ALLOWED: dict[str, set[str]] = {
    "ledger": {"ledger"},
    "worker.base": {"ledger", "worker.base"},
    "worker.engine": {"ledger", "worker.base", "worker.engine"},
    "worker.engine.models": {"ledger", "worker.base", "worker.engine.models"},
    "worker.lifecycle": {"ledger", "worker.base", "worker.engine", "worker.lifecycle"},
    "worker.edges": {"ledger", "worker.base", "worker.engine", "worker.lifecycle", "worker.edges"},
    "worker.dev": {"ledger", "worker"},
    # the public names of CONTRACT §4 and §9, re-exported from their floors
    "worker.tools": {"worker.engine.tools"},
    "worker.client": {"worker.edges.client"},
    # the demo's tools, the default DRES_TOOLS: written against the public face alone
    "worker.demo_tools": {"worker.tools"},
    "tasks": {"ledger", "worker", "tasks"},
}
#: imports made inside a function, allowed where a module-level one is not
LAZY: dict[str, set[str]] = {
    # the CLI's `demo` command runs the demo: the one way into dev from below
    "worker.edges.cli": {"worker.dev"},
}
#: third-party packages a part may use, besides the standard library (None: any)
THIRD_PARTY: dict[str, set[str] | None] = {
    "ledger": {"redis", "pydantic"},
    "worker.engine": {
        "redis",
        "pydantic",
        "pydantic_core",
        "structlog",
        "anthropic",
        "openai",
        "httpx",
        "jsonschema",
    },
    # tools from elsewhere: the official MCP SDK (its types are a package of their own)
    "worker.engine.tools.sources": {"pydantic", "structlog", "httpx", "mcp", "mcp_types"},
    "worker.lifecycle": {"redis", "structlog"},
}
DRES = ("ledger", "worker", "tasks")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> list[tuple[str, bool]]:
    """Every module ``path`` imports, and whether the import is at module level."""
    tree = ast.parse(path.read_text(), filename=str(path))
    top = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, id(node) in top) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.module, id(node) in top))
    return found


def rule(table: dict[str, set[str]], module: str) -> set[str]:
    keys = [k for k in table if module == k or module.startswith(k + ".")]
    return table[max(keys, key=len)] if keys else set()


def within(name: str, allowed: set[str]) -> bool:
    return any(name == a or name.startswith(a + ".") for a in allowed)


def modules() -> list[Path]:
    return sorted(p for package in DRES for p in (ROOT / package).rglob("*.py"))


def violations(path: Path) -> list[str]:
    module = module_name(path)
    allowed = rule(ALLOWED, module)
    lazy = rule(LAZY, module)
    third = next(
        (
            v
            for k, v in sorted(THIRD_PARTY.items(), key=lambda kv: -len(kv[0]))
            if module == k or module.startswith(k + ".")
        ),
        None,
    )
    out = []
    for name, top in imports(path):
        root = name.split(".")[0]
        if root in DRES:
            if not (within(name, allowed) or (not top and within(name, lazy))):
                out.append(f"{module} imports {name}")
        elif root not in STDLIB and third is not None and root not in third:
            out.append(f"{module} imports the third-party {root}")
    return out


@pytest.mark.parametrize("path", modules(), ids=module_name)
def test_a_module_imports_only_the_floors_below_it(path: Path) -> None:
    assert violations(path) == []


def test_every_module_lives_on_a_floor_with_a_rule() -> None:
    homeless = [module_name(p) for p in modules() if not rule(ALLOWED, module_name(p))]
    assert homeless in ([], ["worker"]), homeless


def test_every_floor_says_what_it_may_import() -> None:
    floors = [p for p in (ROOT / "worker").iterdir() if (p / "__init__.py").exists()]
    assert {p.name for p in floors} == {"base", "engine", "lifecycle", "edges", "dev"}
    for floor in floors:
        doc = ast.get_docstring(ast.parse((floor / "__init__.py").read_text())) or ""
        assert "May import" in doc, f"worker/{floor.name}/__init__.py does not say"


def strings(path: Path) -> list[str]:
    """Every string constant of ``path``'s code."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return [
        n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    ]


@pytest.mark.parametrize("floor", ["base", "engine", "lifecycle"])
def test_no_floor_below_the_edges_names_the_dev_floor_even_as_a_string(floor: str) -> None:
    """A default that imports ``worker.dev`` by name (a module, a resource) is an arrow the
    import walk cannot see: the demo's defaults name neutral homes instead."""
    named = [
        module_name(path)
        for path in sorted((ROOT / "worker" / floor).rglob("*.py"))
        if any("worker.dev" in text or "worker/dev" in text for text in strings(path))
    ]
    assert named == []


def test_the_walk_sees_a_reversed_arrow_and_a_lazy_one(tmp_path: Path) -> None:
    """Guard against a vacuous check: the walker finds a floor's forbidden imports."""
    engine = tmp_path / "worker" / "engine"
    engine.mkdir(parents=True)
    probe = engine / "probe.py"
    probe.write_text("import celery\nfrom worker.edges.api import x\ndef f():\n    import tasks\n")
    found = imports(probe)
    assert ("celery", True) in found and ("tasks", False) in found
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        assert violations(probe) == [
            "worker.engine.probe imports the third-party celery",
            "worker.engine.probe imports worker.edges.api",
            "worker.engine.probe imports tasks",
        ]
    finally:
        ROOT = saved
