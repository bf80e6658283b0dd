"""bench/'s own house: no module imports itself back through another (not even for typing, not
even inside a function), and none grows past ``MAX_LINES``. Rows share ``bench.harness``; a group
that needs another's code takes it from a module below both, never from the one that uses it.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: lines a bench module may have (STYLE budgets ~300-400; past this it wants splitting)
MAX_LINES = 450


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def bench_imports(path: Path, root: Path, known: set[str]) -> set[str]:
    """The bench modules ``path`` imports anywhere in it: at module level, under
    ``TYPE_CHECKING``, inside a function, relative or absolute, ``from bench import x`` too."""
    package = module_name(path, root).rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([base] if base else [])])
            names = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        else:
            continue
        found |= {name for name in names if name in known}
    return found


def bench_files(root: Path = ROOT) -> list[Path]:
    return sorted((root / "bench").rglob("*.py"))


def graph(root: Path) -> dict[str, set[str]]:
    paths = bench_files(root)
    known = {module_name(p, root) for p in paths}
    return {module_name(p, root): bench_imports(p, root, known) - {"bench"} for p in paths}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every import circle found by a depth-first walk, each as the path that closes it."""
    found: list[list[str]] = []
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            found.append([*path[path.index(module) :], module])
            return
        if module in done:
            return
        for target in sorted(edges.get(module, ())):
            visit(target, [*path, module])
        done.add(module)

    for module in sorted(edges):
        visit(module, [])
    return found


def test_no_bench_module_imports_itself_back() -> None:
    edges = graph(ROOT)
    assert "bench.harness" in edges and edges["bench.harness"] == set(), edges["bench.harness"]
    assert circles(edges) == []


def test_no_bench_module_is_over_its_line_budget() -> None:
    sizes = {
        p.relative_to(ROOT): len(p.read_text().splitlines()) for p in ROOT.glob("bench/**/*.py")
    }
    assert {str(p): n for p, n in sizes.items() if n > MAX_LINES} == {}


def test_the_walk_sees_a_circle_through_a_typing_import(tmp_path: Path) -> None:
    """Guard against a vacuous check: a circle closed under TYPE_CHECKING, by a relative import
    and by ``from bench import x`` is found."""
    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / "__init__.py").write_text("")
    (bench / "a.py").write_text("from bench import b\n")
    (bench / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .c import x\n"
    )
    (bench / "c.py").write_text("def f():\n    import bench.a\n")
    assert circles(graph(tmp_path)) == [["bench.a", "bench.b", "bench.c", "bench.a"]]
