"""The direction of dependencies is tasks -> worker -> ledger, never back (STYLE: shape)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def imported_roots(path: Path, *, module_level_only: bool = False) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    nodes = tree.body if module_level_only else list(ast.walk(tree))
    roots: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("path", modules("ledger"), ids=lambda p: p.name)
def test_ledger_depends_on_redis_pydantic_and_the_standard_library_only(path: Path) -> None:
    allowed = {"ledger", "redis", "pydantic", "__future__"} | set(sys.stdlib_module_names)
    assert imported_roots(path) <= allowed, f"{path.name} imports {imported_roots(path) - allowed}"


@pytest.mark.parametrize("path", modules("worker"), ids=lambda p: p.name)
def test_worker_never_imports_tasks_at_module_level(path: Path) -> None:
    assert "tasks" not in imported_roots(path, module_level_only=True)


def test_the_import_walk_sees_a_forbidden_import(tmp_path: Path) -> None:
    """Guard against a vacuous check: the walker does find celery and worker imports."""
    probe = tmp_path / "probe.py"
    probe.write_text("import celery\nfrom worker.tools import tool\ndef f():\n    import tasks\n")
    assert {"celery", "worker", "tasks"} <= imported_roots(probe)
    assert "tasks" not in imported_roots(probe, module_level_only=True)


@pytest.mark.parametrize(
    "path",
    [
        *(ROOT / "worker" / name for name in ("loop.py", "history.py", "recorder.py")),
        *modules("worker/tools"),
        *modules("worker/models"),
    ],
    ids=lambda p: f"{p.parent.name}/{p.name}",
)
def test_the_loop_executor_and_models_do_not_import_celery(path: Path) -> None:
    assert "celery" not in imported_roots(path)
