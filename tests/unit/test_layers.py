"""The floors of the house and the arrows allowed between them (STYLE: shape; docs/architecture.md).

``tasks -> worker -> ledger``, never back; inside ``worker``, each floor imports only the floors
below it: ``base`` <- ``engine`` <- ``lifecycle`` <- ``edges`` <- ``dev``. Beside the product,
``rigs`` (what tests, bench and chaos stand dres up on) imports only the product, and ``bench`` and
``chaos`` import the product and the rigs, never ``tests``. One walk of every top-level package's
imports checks every rule, so a reversed arrow fails here.
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
    # the edges' wings (worker/edges/__init__.py): each faces one thing and imports only the
    # wings it needs; runtime (the composition root) and client stand at the top of the floor
    "worker.edges": {"ledger", "worker.base", "worker.engine", "worker.lifecycle", "worker.edges"},
    "worker.edges.redis": {"ledger", "worker.base", "worker.edges.redis"},
    "worker.edges.celery": {
        "ledger",
        "worker.base",
        "worker.engine",
        "worker.lifecycle",
        "worker.edges.celery",
        "worker.edges.redis",
    },
    "worker.edges.http": {
        "ledger",
        "worker.base",
        "worker.engine",
        "worker.lifecycle",
        "worker.edges.http",
        "worker.edges.redis",
        "worker.edges.runtime",
    },
    "worker.dev": {"ledger", "worker"},
    # the public names of docs/tools.md and docs/architecture.md, re-exported from their floors
    "worker.tools": {"worker.engine.tools"},
    "worker.client": {"worker.edges.client"},
    # the demo's tools, the default DRES_TOOLS: written against the public face alone
    "worker.demo_tools": {"worker.tools"},
    # the examples' own tools (examples/ai-sdk-chat/chat_tools.py): the public face alone too
    "examples": {"worker.tools"},
    "tasks": {"ledger", "worker", "tasks"},
    # beside the product: the testing rigs, and the proofs and the suite that stand on them
    "rigs": {"ledger", "worker", "rigs"},
    "bench": {"ledger", "worker", "tasks", "rigs", "bench"},
    "chaos": {"ledger", "worker", "tasks", "rigs", "chaos"},
    "tests": {"ledger", "worker", "tasks", "rigs", "bench", "chaos", "tests"},
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
    # the Agents SDK's adapter, the one module that imports the SDK (docs/loops.md)
    "worker.engine.frameworks.openai_agents_loop": {"agents", "openai", "pydantic_core"},
}
#: every top-level package of the repository: the product, then what stands beside it
DRES = ("ledger", "worker", "tasks", "rigs", "bench", "chaos", "tests", "examples")
#: top-level directories that hold no package of the repository (tools, caches, build output)
NOT_PACKAGES = {"build", "dist"}


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
    """Every Python module of the repository's packages (an example's installed node packages,
    gitignored, are none of its)."""
    found = (p for package in DRES for p in (ROOT / package).rglob("*.py"))
    return sorted(p for p in found if "node_modules" not in p.parts)


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


def test_every_top_level_package_is_walked_and_has_a_rule() -> None:
    """A new top-level directory of Python files is not outside the walk by omission."""
    found = {
        p.name
        for p in ROOT.iterdir()
        if p.is_dir()
        and not p.name.startswith(".")
        and p.name not in NOT_PACKAGES
        and any(p.rglob("*.py"))
    }
    assert found == set(DRES)
    ruled = {key.split(".")[0] for key in ALLOWED}
    assert [package for package in DRES if package not in ruled] == []


def test_the_rigs_are_no_pytest_plugin() -> None:
    """What needs pytest (fixtures, skip-or-fail) is ``tests/support``'s: the bench and chaos run
    the rigs without it."""
    rigs = sorted((ROOT / "rigs").rglob("*.py"))
    assert rigs
    assert [
        module_name(p) for p in rigs for name, _ in imports(p) if name.split(".")[0] == "pytest"
    ] == []


def test_every_floor_says_what_it_may_import() -> None:
    floors = [p for p in (ROOT / "worker").iterdir() if (p / "__init__.py").exists()]
    assert {p.name for p in floors} == {"base", "engine", "lifecycle", "edges", "dev"}
    for floor in floors:
        doc = ast.get_docstring(ast.parse((floor / "__init__.py").read_text())) or ""
        assert "May import" in doc, f"worker/{floor.name}/__init__.py does not say"


def test_every_wing_of_the_edges_says_what_it_may_import() -> None:
    edges = ROOT / "worker" / "edges"
    wings = [p for p in edges.iterdir() if (p / "__init__.py").exists()]
    assert {p.name for p in wings} == {"http", "cli", "celery", "redis"}
    for wing in wings:
        doc = ast.get_docstring(ast.parse((wing / "__init__.py").read_text())) or ""
        assert "May import" in doc, f"worker/edges/{wing.name}/__init__.py does not say"
    top = [p.name for p in edges.glob("*.py") if p.name != "__init__.py"]
    assert len(top) <= 6, f"worker/edges/ has {len(top)} modules at its top: {sorted(top)}"


def module_graph() -> dict[str, set[str]]:
    """Module -> the dres modules it imports (at any level, type-only ones too): ``from a.b
    import c`` is an arrow to ``a.b.c`` when that is a module, else to ``a.b``."""
    names = {module_name(p) for p in modules()}
    graph: dict[str, set[str]] = {}
    for path in modules():
        tree = ast.parse(path.read_text(), filename=str(path))
        found: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                subs = {f"{node.module}.{a.name}" for a in node.names}
                found |= (subs & names) or {node.module}
        graph[module_name(path)] = {n for n in found if n in names} - {module_name(path)}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_itself_through_others() -> None:
    """No import circle anywhere in the tree, lazy and type-only imports included: a type two
    modules share lives below both."""
    assert circles(module_graph()) == []


def test_the_circle_finder_sees_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]


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
    probe.write_text(
        "import celery\nfrom worker.edges.http.app import x\ndef f():\n    import tasks\n"
    )
    found = imports(probe)
    assert ("celery", True) in found and ("tasks", False) in found
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        assert violations(probe) == [
            "worker.engine.probe imports the third-party celery",
            "worker.engine.probe imports worker.edges.http.app",
            "worker.engine.probe imports tasks",
        ]
    finally:
        ROOT = saved


def test_the_walk_sees_a_rig_or_a_proof_that_imports_the_suite(tmp_path: Path) -> None:
    """Guard against a vacuous check: ``tests`` is first-party, so importing it is seen."""
    for package, body in [("rigs", "from tests.support import DRES_ENV\nimport bench\n")] + [
        (proof, "from tests.support.suite import IN_CI\n") for proof in ("bench", "chaos")
    ]:
        (tmp_path / package).mkdir()
        (tmp_path / package / "probe.py").write_text(body)
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        assert violations(tmp_path / "rigs" / "probe.py") == [
            "rigs.probe imports tests.support",
            "rigs.probe imports bench",
        ]
        assert violations(tmp_path / "bench" / "probe.py") == [
            "bench.probe imports tests.support.suite"
        ]
        assert violations(tmp_path / "chaos" / "probe.py") == [
            "chaos.probe imports tests.support.suite"
        ]
    finally:
        ROOT = saved
