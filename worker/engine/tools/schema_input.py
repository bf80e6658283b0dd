"""A tool from elsewhere's input checked against its declared JSON schema (``jsonschema``), with
the field named in the error as a Python tool's pydantic error names it.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonschema
from jsonschema.exceptions import SchemaError, ValidationError, best_match

from worker.base.errors import ToolDefinitionError


class SchemaInput:
    """Checks inputs against one schema (its draft from ``$schema``, else 2020-12)."""

    def __init__(self, schema: dict[str, Any]) -> None:
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        try:
            cls.check_schema(schema)
        except SchemaError as e:
            raise ToolDefinitionError(f"an input schema is not valid: {e.message}") from None
        self.validator = cls(schema)

    def check(self, raw: Any) -> tuple[Any, Any] | str:
        """``(input, input)`` (a copy: what is invoked is what is recorded), or ``where: why``."""
        if raw is None:
            raw = {}
        error = best_match(self.validator.iter_errors(raw))
        if error is not None:
            return describe(error)
        data = copy.deepcopy(raw)
        return data, data


def describe(error: ValidationError) -> str:
    """``field: why``: the field is the error's path, or for a missing or unexpected property
    the property itself."""
    path = [str(p) for p in error.absolute_path]
    if error.validator == "required" and isinstance(error.instance, dict):
        missing = [n for n in error.validator_value if n not in error.instance]
        if missing:
            return ".".join([*path, str(missing[0])]) + ": Field required"
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = set(error.schema.get("properties", {}))
        extra = sorted(k for k in error.instance if k not in allowed)
        if extra:
            return ".".join([*path, str(extra[0])]) + ": Extra inputs are not permitted"
    return f"{'.'.join(path) or 'input'}: {error.message}"
