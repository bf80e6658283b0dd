"""Python tools (DRES_TOOLS): each module's ``@tool`` functions."""

from __future__ import annotations

import importlib
import traceback
from collections.abc import Iterable

from worker.base.errors import ToolDefinitionError
from worker.engine.tools.spec import ToolSpec, is_tool, specs_of


def module_tools(modules: Iterable[str]) -> list[ToolSpec]:
    """Import each module and take its ``@tool`` functions; a module that cannot be imported
    or defines none raises ``ToolDefinitionError`` naming it."""
    specs = []
    for module_name in modules:
        try:
            module = importlib.import_module(module_name)
        except ImportError as e:
            raise ToolDefinitionError(f"DRES_TOOLS: cannot import {module_name!r}: {e}") from e
        except SyntaxError as e:  # its file and line: what a person opens to fix it
            where = f"({e.filename}, line {e.lineno})"
            raise ToolDefinitionError(
                f"DRES_TOOLS: cannot import {module_name!r}: {e.msg} {where}"
            ) from None
        except Exception as e:  # raised by the module's own code as it ran (a missing key)
            raise ToolDefinitionError(
                f"DRES_TOOLS: cannot import {module_name!r}: {_raised(e)}"
            ) from None
        found = [v for v in vars(module).values() if is_tool(v)]
        if not found:
            raise ToolDefinitionError(f"DRES_TOOLS: module {module_name!r} defines no @tool")
        specs += specs_of(found)
    return specs


def _raised(error: Exception) -> str:
    """One line: the exception's type and the first line of its message, and where it was
    raised (the deepest frame: the module's own line, or the library's it called)."""
    message = str(error).strip().splitlines()
    said = f"{type(error).__name__}: {message[0]}" if message else type(error).__name__
    frames = traceback.extract_tb(error.__traceback__)
    return f"{said} ({frames[-1].filename}, line {frames[-1].lineno})" if frames else said
