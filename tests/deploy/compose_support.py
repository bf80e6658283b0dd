"""``compose.yaml`` read as Docker Compose reads it, for the tests that run it without Docker.

``service(name, variables)`` is one service with its ``command``, ``environment`` and
``healthcheck`` interpolated from ``variables`` the way Compose does from the shell
(``${VAR}``, ``${VAR:-default}``, ``${VAR-default}``, ``${VAR:?message}``, ``${VAR?message}``,
``$$`` for a literal ``$``), and ``environment`` keys without a value passed through from
``variables`` when set there, else left out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "compose.yaml"
#: what the compose file's header sets for the ha profile: dres follows its Sentinels
HA_VARIABLES = {
    "DRES_REDIS_SENTINELS": "sentinel-1:26379,sentinel-2:26379,sentinel-3:26379",
    "DRES_REDIS_MASTER": "dres",
}

_REFERENCE = re.compile(
    r"\$(?:(?P<escaped>\$)"
    r"|\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}"
    r"|(?P<named>[A-Za-z_][A-Za-z0-9_]*))"
)


class MissingVariable(Exception):
    """A ``${VAR:?message}`` whose variable is not set: Compose refuses the file."""


def interpolate(text: str, variables: Mapping[str, str]) -> str:
    def one(match: re.Match[str]) -> str:
        if match["escaped"]:
            return "$"
        name = match["braced"] or match["named"]
        value, op, arg = variables.get(name), match["op"] or "", match["arg"] or ""
        # with ':' an empty value counts as unset, without it only a missing one does
        unset = value is None or (op.startswith(":") and value == "")
        if op.endswith("-"):
            return arg if unset else str(value)
        if op.endswith("?"):
            if unset:
                raise MissingVariable(f"{name}: {arg}")
            return str(value)
        return value or ""

    return _REFERENCE.sub(one, text)


def load(path: Path = COMPOSE) -> dict[str, Any]:
    """The compose file as YAML (anchors and ``<<`` merges resolved), not yet interpolated."""
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    return data


@dataclass(frozen=True)
class Service:
    name: str
    raw: dict[str, Any]
    command: list[str]
    environment: dict[str, str]
    #: the healthcheck's command without its ``CMD`` marker
    healthcheck: list[str]


def service(name: str, variables: Mapping[str, str], path: Path = COMPOSE) -> Service:
    raw = load(path)["services"][name]
    environment = {}
    for key, value in (raw.get("environment") or {}).items():
        if value is None:
            if key in variables:
                environment[key] = variables[key]
            continue
        environment[key] = interpolate(str(value), variables)
    check = raw.get("healthcheck", {}).get("test", [])
    if check and check[0] != "CMD":
        raise ValueError(f"{name}: the tests run CMD healthchecks only, not {check[0]}")
    return Service(
        name=name,
        raw=raw,
        command=[interpolate(str(arg), variables) for arg in raw.get("command", [])],
        environment=environment,
        healthcheck=[interpolate(str(arg), variables) for arg in check[1:]],
    )
