"""Importing a module a setting names (``DRES_TOOLS``'s, ``DRES_LOOP``'s): whatever stops it
becomes one line naming the module and, for a syntax error or an error its own code raised, the
file and line a person opens to fix it (docs/configuration.md: bad configuration fails at start
with one line)."""

from __future__ import annotations

import importlib
import traceback
from collections.abc import Callable
from types import ModuleType


def import_named(module_name: str, failed: Callable[[str], Exception]) -> ModuleType:
    """``module_name`` imported, or ``failed(line)`` raised, where ``line`` is ``cannot import
    'MODULE': WHY``."""
    said = f"cannot import {module_name!r}"
    try:
        return importlib.import_module(module_name)
    except ImportError as e:
        raise failed(f"{said}: {e}") from e
    except SyntaxError as e:  # its file and line: what a person opens to fix it
        raise failed(f"{said}: {e.msg} ({e.filename}, line {e.lineno})") from None
    except Exception as e:  # raised by the module's own code as it ran (a missing key)
        raise failed(f"{said}: {raised(e)}") from None


def raised(error: BaseException) -> str:
    """One line: the exception's type and the first line of its message, and where it was
    raised (the deepest frame: the module's own line, or the library's it called)."""
    message = str(error).strip().splitlines()
    said = f"{type(error).__name__}: {message[0]}" if message else type(error).__name__
    frames = traceback.extract_tb(error.__traceback__)
    return f"{said} ({frames[-1].filename}, line {frames[-1].lineno})" if frames else said


__all__ = ["import_named", "raised"]
