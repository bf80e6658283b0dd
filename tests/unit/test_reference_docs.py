"""The reference (docs/) agrees with the code, item by item: the HTTP API's routes and their
statuses with the app and its OpenAPI document, the events and their fields with
``ledger.events``, the commands and their options with the CLI's parser, the settings with
``dres config``. Each checker is a pure comparison, and a guard feeds it a made-up item to prove
it sees one."""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, get_args

import pytest
from fastapi import FastAPI
from fastapi.routing import iter_route_contexts

from ledger import event_models, events
from rigs import ROOT
from worker.base.settings import Settings, load_settings
from worker.edges.cli.config import rows
from worker.edges.cli.main import build_parser
from worker.edges.http.app import create_api

DOCS = ROOT / "docs"
#: a row of http-api.md's table of routes: | `METHOD /path` | 200, 404, … |
ROUTE_ROW = re.compile(r"^\| `([A-Z]+) (/\S*)` \| ([0-9, ]+) \|")
#: a route's heading in http-api.md: ### `METHOD /path` → status
ROUTE_HEADING = re.compile(r"^### `([A-Z]+) (/[^`?]*)[^`]*`")
#: a row of events.md's table of types: | `type` | when | fields |
EVENT_ROW = re.compile(r"^\| `([a-z_]+)` \| [^|]+ \| (.*) \|$")
#: a row of a table in commands.md: | `dres COMMAND …` | does |
COMMAND_ROW = re.compile(r"^\| `dres ([a-z]+(?: [a-z]+)?)([^`]*)` \|")
#: a row of configuration.md's table: | `DRES_NAME` | `default` | meaning |
SETTING_ROW = re.compile(r"^\| `(DRES_[A-Z0-9_]+)` \| `([^`]*)` \| (.+) \|$")
#: (method, path) -> its statuses, or None when the OpenAPI document does not hold the route
Routes = dict[tuple[str, str], frozenset[int] | None]


def differences(documented: Mapping[str, Any], actual: Mapping[str, Any], what: str) -> list[str]:
    """What one side names and the other does not, and values that differ, in words."""
    found = [f"{what} {name} is not documented" for name in sorted(set(actual) - set(documented))]
    found += [
        f"{what} {name} is documented but absent" for name in sorted(set(documented) - set(actual))
    ]
    found += [
        f"{what} {name}: documented {documented[name]!r}, actual {actual[name]!r}"
        for name in sorted(set(documented) & set(actual))
        if actual[name] is not None and documented[name] != actual[name]
    ]
    return found


def lines(name: str) -> list[str]:
    return (DOCS / name).read_text().splitlines()


# -- docs/http-api.md <-> the app and its OpenAPI document --------------------------------------


def documented_routes() -> Routes:
    found: Routes = {}
    for line in lines("http-api.md"):
        if match := ROUTE_ROW.match(line):
            route = (match.group(1), match.group(2))
            assert route not in found, f"{route} is listed twice"
            found[route] = frozenset(int(code) for code in match.group(3).split(","))
    return found


def app_routes(api: FastAPI) -> Routes:
    """Every route the app answers (HEAD aside), with its declared statuses when in the document."""
    paths = api.openapi()["paths"]
    found: Routes = {}
    for route in iter_route_contexts(api.router.routes):
        for method in sorted((route.methods or set()) - {"HEAD"}):
            operation = paths.get(route.path, {}).get(method.lower())
            statuses = None if operation is None else frozenset(map(int, operation["responses"]))
            found[(method, str(route.path))] = statuses
    return found


@pytest.fixture(scope="module")
def api() -> FastAPI:
    """The app as ``dres api`` builds it (no Redis is needed to build it or its document)."""
    return create_api(load_settings())


def test_http_api_md_lists_every_route_of_the_app_with_the_statuses_its_document_declares(
    api: FastAPI,
) -> None:
    """Every route and method of the app is in http-api.md's table with exactly the statuses the
    OpenAPI document declares; the table names no route the app lacks."""
    documented = {" ".join(r): s for r, s in documented_routes().items()}
    actual = {" ".join(r): s for r, s in app_routes(api).items()}
    assert not differences(documented, actual, "route")


def test_every_route_heading_of_http_api_md_is_a_route_of_its_table() -> None:
    """A section of http-api.md describes a route its table lists (so the prose cannot drift)."""
    table = documented_routes()
    headings = [m.groups() for line in lines("http-api.md") if (m := ROUTE_HEADING.match(line))]
    assert headings
    assert [h for h in headings if h not in table] == []


def test_the_route_check_sees_a_made_up_route_and_a_made_up_status(api: FastAPI) -> None:
    """Guard: a route the docs lack, a documented route the app lacks and a status are seen."""
    documented = {" ".join(r): s for r, s in documented_routes().items()}
    actual = {" ".join(r): s for r, s in app_routes(api).items()}
    made_up = differences(documented, {**actual, "GET /v1/made-up": None}, "route")
    assert "route GET /v1/made-up is not documented" in made_up
    gone = differences({**documented, "PUT /v1/turns": None}, actual, "route")
    assert "route PUT /v1/turns is documented but absent" in gone
    healthz = actual["GET /healthz"]
    assert healthz is not None
    wrong = differences(documented, {**actual, "GET /healthz": healthz | {418}}, "route")
    assert [w for w in wrong if w.startswith("route GET /healthz: documented")]


# -- docs/events.md <-> ledger/events.py ---------------------------------------------------------


def _names(cell: str) -> set[str]:
    """The `names` of a cell outside its (explanations)."""
    while (plain := re.sub(r"\([^()]*\)", "", cell)) != cell:
        cell = plain
    return set(re.findall(r"`([a-z_]+)`", cell))


def documented_events() -> dict[str, frozenset[str]]:
    text = lines("events.md")
    start = text.index("## Fields every event has") + 2
    common = " ".join(text[start : text.index("", start)])  # the paragraph under the heading
    found = {"*": frozenset(_names(common))}
    for line in text:
        if match := EVENT_ROW.match(line):
            assert match.group(1) not in found, f"{match.group(1)} is listed twice"
            found[match.group(1)] = frozenset(_names(match.group(2)))
    return found


def code_events() -> dict[str, frozenset[str]]:
    common = set(event_models._Event.model_fields)
    found = {"*": frozenset(common | {"type"})}
    for model in get_args(get_args(events.Event)[0]):
        name = model.model_fields["type"].default
        found[name] = frozenset(set(model.model_fields) - common - {"type"})
    return found


def test_events_md_names_every_event_type_and_field_of_ledger_events_and_no_other() -> None:
    """Every event type and each of its fields (and the common ones) are in events.md's table,
    and the table names no type or field the code lacks."""
    assert not differences(documented_events(), code_events(), "event")


def test_the_event_check_sees_a_made_up_type_and_a_made_up_field() -> None:
    """Guard: a type or a field the docs lack is seen."""
    documented, actual = documented_events(), code_events()
    made_up = differences(documented, {**actual, "made_up": frozenset()}, "event")
    assert "event made_up is not documented" in made_up
    field = differences(documented, {**actual, "text": actual["text"] | {"made_up"}}, "event")
    assert [f for f in field if f.startswith("event text: documented")]


# -- docs/commands.md <-> the CLI's parser ------------------------------------------------------


def _subcommands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Each command, and each verb of a command that has verbs (``schedule add``) instead."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, command in action.choices.items():
                verbs = list(_subcommands(command))
                yield from (
                    ((f"{name} {verb}", p) for verb, p in verbs) if verbs else [(name, command)]
                )


def parser_commands() -> dict[str, frozenset[str]]:
    """Each command's options and positionals (``--json``, ``TURN_ID``)."""
    found = {}
    for name, command in _subcommands(build_parser()):
        words = {o for a in command._actions for o in a.option_strings if o.startswith("--")}
        words -= {"--help"}
        words |= {a.dest.upper() for a in command._actions if not a.option_strings}
        found[name] = frozenset(words)
    return found


def documented_commands() -> dict[str, frozenset[str]]:
    found: dict[str, frozenset[str]] = {}
    for line in lines("commands.md"):
        if match := COMMAND_ROW.match(line):
            assert match.group(1) not in found, f"dres {match.group(1)} is listed twice"
            words = set(re.findall(r"--[a-z][a-z-]*", match.group(2)))
            words |= set(re.findall(r"\b[A-Z][A-Z_]+\b", match.group(2)))
            found[match.group(1)] = frozenset(words)
    return found


def command_differences(
    documented: dict[str, frozenset[str]], actual: dict[str, frozenset[str]]
) -> list[str]:
    """Commands either side lacks; options either side lacks; arguments the docs lack (the
    docs' other capitals are option values: ``--model SPEC``)."""
    found = [f"dres {name}: not documented" for name in sorted(set(actual) - set(documented))]
    found += [
        f"dres {name}: documented but absent" for name in sorted(set(documented) - set(actual))
    ]
    for name in sorted(set(documented) & set(actual)):
        found += [
            f"dres {name} {w}: not documented" for w in sorted(actual[name] - documented[name])
        ]
        found += [
            f"dres {name} {w}: documented but absent"
            for w in sorted(documented[name] - actual[name])
            if w.startswith("--")
        ]
    return found


def test_commands_md_names_every_command_option_and_argument_of_the_parser_and_no_other() -> None:
    """Every subcommand of ``dres`` with each of its options and arguments is in commands.md, and
    commands.md names no command or option the parser lacks."""
    assert command_differences(documented_commands(), parser_commands()) == []


def test_the_command_check_sees_a_made_up_command_option_and_argument() -> None:
    """Guard: a command, an option or an argument the docs lack is seen, and an option they
    name that the parser lacks."""
    documented, actual = documented_commands(), parser_commands()
    seen = command_differences(documented, {**actual, "made-up": frozenset()})
    assert "dres made-up: not documented" in seen
    option = {**actual, "stop": actual["stop"] | {"--made-up", "MADE_UP"}}
    assert {"dres stop --made-up: not documented", "dres stop MADE_UP: not documented"} <= set(
        command_differences(documented, option)
    )
    gone = {**documented, "stop": documented["stop"] | {"--gone"}}
    assert "dres stop --gone: documented but absent" in command_differences(gone, actual)


# -- docs/configuration.md <-> dres config -------------------------------------------------------


@pytest.fixture
def no_dres_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("DRES_"):
            monkeypatch.delenv(name)


def documented_settings() -> dict[str, str]:
    found: dict[str, str] = {}
    for line in lines("configuration.md"):
        if match := SETTING_ROW.match(line):
            assert match.group(1) not in found, f"{match.group(1)} is listed twice"
            found[match.group(1)] = match.group(2)
    return found


def test_configuration_md_lists_every_setting_of_dres_config_with_its_default(
    no_dres_env: None,
) -> None:
    """Every row ``dres config`` prints is in configuration.md's table with its default, and the
    table names no setting ``dres config`` lacks."""
    actual = {row.variable: row.default for row in rows(Settings())}
    assert not differences(documented_settings(), actual, "setting")


def test_the_setting_check_sees_a_made_up_setting_and_default(no_dres_env: None) -> None:
    """Guard: a setting the docs lack, or another default, is seen."""
    documented = documented_settings()
    actual = {row.variable: row.default for row in rows(Settings())}
    made_up = differences(documented, {**actual, "DRES_MADE_UP": "1"}, "setting")
    assert "setting DRES_MADE_UP is not documented" in made_up
    default = differences(documented, {**actual, "DRES_MAX_CHUNKS": "51"}, "setting")
    assert "setting DRES_MAX_CHUNKS: documented '50', actual '51'" in default


# -- citations --------------------------------------------------------------------------------


def test_no_file_of_the_tree_cites_the_contract_outside_the_repository() -> None:
    """Docstrings and comments cite docs/ pages: CONTRACT.md is not in the repository, so a
    reader of the code could not follow a "CONTRACT §N"."""
    root = Path(__file__).resolve().parents[2]
    citing = [
        str(path.relative_to(root))
        for package in ("ledger", "worker", "tasks", "rigs", "bench", "chaos", "tests")
        for path in (root / package).rglob("*")
        if path.suffix in {".py", ".js", ".css", ".html", ".md"}
        and "node_modules" not in path.parts  # the node clients' packages (tests/node), not ours
        and path != Path(__file__).resolve()  # this test names what it looks for
        and re.search(r"CONTRACT §|(?<![\w/])§\d", path.read_text(encoding="utf-8"))
    ]
    assert citing == []
