"""``dres config``: every ``DRES_*`` setting with its value, its default and one line of meaning,
read from the settings class itself (``worker.base.settings.Settings``), so the table can never
list a setting the class lacks or miss one it has. Secrets are masked (``worker.base.masking``,
docs/security.md): tokens, passwords and secrets, every URL's password and query values (a webhook
URL's path too), the tokens in ``DRES_AGENTS``, an MCP server's command arguments, and every
``env`` and ``headers`` value of an MCP server or an OpenAPI source (their keys are kept).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from worker.base.masking import MASK, mask_command, mask_text, mask_url, mask_values
from worker.base.settings import Settings

#: words that make a setting a secret by its name alone (``api_token``, a setting added later):
#: a JSON object's values are masked, its keys kept; any other text is masked whole
SECRET_WORDS = frozenset({"token", "password", "secret"})
#: settings that hold URLs (``;``-separated for a Sentinel broker) whose userinfo may be a secret
URLS = frozenset({"redis_url", "broker_url", "public_url"})
#: settings that hold a URL whose path and query are a secret too (a webhook's URL is often its
#: only credential: Slack's, for one, carries its key in the path)
SECRET_PATHS = frozenset({"approval_webhook"})
#: JSON settings of named entries ``{"NAME": {…}}`` (docs/configuration.md, docs/tools.md): per
#: entry, the fields whose every value is masked (a header or an environment variable is often a
#: credential), the fields that are URLs, and those that are command lines (the program kept)
ENTRIES = {
    "agents": (frozenset({"token"}), frozenset({"url"}), frozenset[str]()),
    "mcp_servers": (frozenset({"env", "headers"}), frozenset({"url"}), frozenset({"command"})),
    "openapi": (frozenset({"headers"}), frozenset({"spec", "base_url"}), frozenset[str]()),
}


@dataclass(frozen=True, slots=True)
class Row:
    variable: str
    value: str
    default: str
    meaning: str


def shown(value: Any) -> str:
    """A setting's value as its environment variable would spell it."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    text = str(value)
    return text if text else "empty"


def _secret_values(value: Any) -> Any:
    """A secret's value masked: a mapping keeps its keys, anything else is masked whole."""
    if isinstance(value, dict):
        return mask_values(value)
    return MASK if value not in (None, "", [], {}) else value


def _mask_entries(
    raw: str, secret: frozenset[str], urls: frozenset[str], commands: frozenset[str]
) -> str:
    try:
        entries = json.loads(raw)
    except json.JSONDecodeError:
        return MASK  # the settings refuse it at start; never shown, it may hold a secret
    for entry in entries.values() if isinstance(entries, dict) else ():
        if not isinstance(entry, dict):
            continue
        for field in secret & entry.keys():
            entry[field] = _secret_values(entry[field])
        for field in urls & entry.keys():
            if isinstance(entry[field], str):
                entry[field] = mask_url(entry[field])
        for field in commands & entry.keys():
            if isinstance(entry[field], list):  # checked at start: its items are strings
                entry[field] = mask_command(entry[field])
    return json.dumps(entries, separators=(",", ":"))


def _secret_setting(value: str) -> str:
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        return MASK
    if isinstance(parsed, dict):  # {"NAME": "TOKEN"}: who may, without what they hold
        return json.dumps(_secret_values(parsed), separators=(",", ":"))
    return MASK


def masked(name: str, value: Any) -> Any:
    # numbers and flags are no secrets (a token budget is a count of tokens)
    if not value or not isinstance(value, str):
        return value
    if SECRET_WORDS & {part.removesuffix("s") for part in name.split("_")}:
        return _secret_setting(value)
    if name in URLS or name in SECRET_PATHS:
        return ";".join(mask_url(url, path=name in SECRET_PATHS) for url in value.split(";"))
    if name in ENTRIES:
        return _mask_entries(value, *ENTRIES[name])
    return mask_text(value)  # a URL in any other setting (a model spec's) keeps no secret


def rows(settings: Settings) -> list[Row]:
    """One row per field of the settings class, in the class's order."""
    table = []
    for name, field in Settings.model_fields.items():
        table.append(
            Row(
                variable="DRES_" + name.upper(),
                value=shown(masked(name, getattr(settings, name))),
                default=shown(masked(name, field.get_default(call_default_factory=True))),
                meaning=field.description or "",
            )
        )
    return table


def render(table: list[Row]) -> str:
    """An aligned table for a person: variable, value, default, meaning."""
    widths = [
        max(len(row.variable) for row in table),
        min(40, max(len(row.value) for row in table)),
        min(26, max(len(row.default) for row in table)),
    ]
    lines = []
    for row in [Row("variable", "value", "default", "meaning"), *table]:
        cells = (row.variable, row.value, row.default)
        lines.append(
            "  ".join(f"{c:<{w}}" for c, w in zip(cells, widths, strict=True)) + "  " + row.meaning
        )
    return "\n".join(lines)
