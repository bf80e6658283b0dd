"""``dres config``: every ``DRES_*`` setting with its value, its default and one line of meaning,
read from the settings class itself (``worker.base.settings.Settings``), so the table can never
list a setting the class lacks or miss one it has. Secrets are masked: tokens and passwords, the
password in a URL's userinfo, and the tokens in ``DRES_AGENTS``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from worker.base.settings import Settings

MASK = "****"
#: settings whose whole value is a secret
SECRETS = frozenset({"api_token", "redis_sentinel_password"})
#: settings that hold URLs (``;``-separated for a Sentinel broker) whose userinfo may be a secret
URLS = frozenset({"redis_url", "broker_url", "approval_webhook", "public_url"})


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


def mask_url(url: str) -> str:
    """The URL with the password of its userinfo masked (a user name alone is kept)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}:{MASK}@{host}"))


def masked(name: str, value: Any) -> Any:
    if name in SECRETS and value:
        return MASK
    if name in URLS and isinstance(value, str):
        return ";".join(mask_url(url) for url in value.split(";"))
    if name == "agents" and isinstance(value, str):
        try:
            apps = json.loads(value)
        except json.JSONDecodeError:
            return value  # the settings refused it already; shown as given
        for app in apps.values() if isinstance(apps, dict) else ():
            if isinstance(app, dict) and app.get("token"):
                app["token"] = MASK
        return json.dumps(apps, separators=(",", ":"))
    return value


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
