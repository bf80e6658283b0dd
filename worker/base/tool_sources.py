"""The tool sources' settings (docs/configuration.md, docs/tools.md): ``DRES_TOOLS``'s modules, and
``DRES_AGENTS``, ``DRES_MCP_SERVERS`` and ``DRES_OPENAPI``, each a JSON object of named entries.
Their parsers check them when the settings are read (so a bad value stops the process at start) and
the sources (``worker.engine.tools.sources``) read them with the same parsers: they live on this
floor because the settings may import nothing above it.

Listing a server or an API here is the operator's trust decision: its tools run with the worker's
reach, and its own hints (MCP annotations, HTTP methods) say which calls are writes, unless the
entry's ``read_only`` / ``writes`` / ``idempotent`` lists override them.
"""

from __future__ import annotations

import json
import re
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from worker.base.masking import mask_command, mask_url

#: a source's name: the prefix of its tools' names (``NAME__tool``), which model providers
#: allow only in ``[A-Za-z0-9_-]``
SOURCE_NAME = re.compile(r"^[A-Za-z0-9-]+(_[A-Za-z0-9-]+)*$")
#: seconds a call to a tool from elsewhere may take by default
DEFAULT_TIMEOUT_S = 30.0


class McpServer(BaseModel):
    """One MCP server (an entry of DRES_MCP_SERVERS): stdio (``command``) or streamable HTTP
    (``url``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    #: the program and its arguments, started over stdio with the SDK's minimal environment
    command: tuple[str, ...] | None = Field(None, min_length=1)
    #: extra environment of a stdio server
    env: dict[str, str] = Field(default_factory=dict)
    #: the server's streamable HTTP endpoint
    url: str | None = Field(None, pattern=r"^https?://[^/\s]+")
    #: headers of every HTTP request (an ``Authorization``)
    headers: dict[str, str] = Field(default_factory=dict)
    #: seconds one call may take before its outcome counts as unknown
    timeout_s: float = Field(DEFAULT_TIMEOUT_S, gt=0)
    #: the operator's overrides of the server's hints, by the server's tool names
    read_only: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    idempotent: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _one_transport(self) -> McpServer:
        if (self.command is None) == (self.url is None):
            raise ValueError("give either command (stdio) or url (streamable HTTP)")
        if self.env and self.command is None:
            raise ValueError("env is for a stdio server (command)")
        if self.headers and self.url is None:
            raise ValueError("headers are for an HTTP server (url)")
        both = sorted(set(self.read_only) & set(self.writes))
        if both:
            raise ValueError(f"tools both read_only and writes: {both}")
        return self

    @property
    def where(self) -> str:
        """Where the server is, as a message may say it: its URL or its program, masked."""
        if self.url is not None:
            return mask_url(self.url)
        return " ".join(mask_command(self.command or ()))


class AgentApp(BaseModel):
    """One dres app ``call_agent`` may delegate to (an entry of DRES_AGENTS)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    #: the app's API base URL, ``http://`` or ``https://``
    url: str = Field(pattern=r"^https?://[^/\s]+")
    #: its DRES_API_TOKEN (sent as a bearer token); empty: none
    token: str = ""


class OpenApi(BaseModel):
    """One HTTP API described by an OpenAPI document (an entry of DRES_OPENAPI)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    #: the document: an http(s) URL or a file path (JSON, or YAML when PyYAML is installed)
    spec: str = Field(min_length=1)
    #: the API's base URL; empty: the first ``servers`` URL of a document read from a file (a
    #: fetched document needs one: its ``servers`` are not trusted with the ``headers``)
    base_url: str = Field("", pattern=r"^(https?://[^/\s]+\S*)?$")
    #: headers of every request (an ``Authorization``)
    headers: dict[str, str] = Field(default_factory=dict)
    #: seconds one request may take before its outcome counts as unknown
    timeout_s: float = Field(DEFAULT_TIMEOUT_S, gt=0)
    #: the operationIds to register; None: every operation with an operationId
    operations: tuple[str, ...] | None = None

    @model_validator(mode="after")
    def _fetched_needs_base_url(self) -> OpenApi:
        if self.spec.startswith(("http://", "https://")) and not self.base_url:
            raise ValueError(
                "a spec fetched over HTTP(S) needs base_url: the document's own servers are "
                "not trusted with the headers"
            )
        return self


M = TypeVar("M", bound=BaseModel)


def parse_entries(raw: str, model: type[M], kind: str, shape: str) -> dict[str, M]:
    """A JSON object's named entries as ``model``s; a ``ValueError`` naming what is wrong
    (``kind``: what an entry is, ``shape``: the object's form, for the message)."""
    try:
        data = json.loads(raw or "{}")
    except json.JSONDecodeError as e:
        raise ValueError(f"not JSON ({e.msg} at character {e.pos})") from None
    if not isinstance(data, dict):
        raise ValueError(f"must be a JSON object: {shape}")
    entries = {}
    for name, entry in data.items():
        if not name.strip():
            raise ValueError(f"a{'n' if kind[0] in 'aeiou' else ''} {kind}'s name is empty")
        try:
            entries[name] = model.model_validate(entry)
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            why = first["msg"].removeprefix("Value error, ")
            if first["type"] == "missing":
                why = "missing"
            elif where == "url":
                why = "must be an http:// or https:// URL"
            raise ValueError(f"{kind} {name!r}: {where or 'entry'}: {why}") from None
    return entries


def _named(entries: dict[str, M], kind: str) -> dict[str, M]:
    for name in entries:
        if not SOURCE_NAME.fullmatch(name):
            raise ValueError(
                f"{kind} {name!r}: a name is letters, digits, '-' and single '_' "
                "(its tools are NAME__tool)"
            )
    return entries


def parse_modules(raw: str) -> list[str]:
    """DRES_TOOLS's module names."""
    return [name.strip() for name in raw.split(",") if name.strip()]


def parse_agents(raw: str) -> dict[str, AgentApp]:
    """DRES_AGENTS's apps by name; a ``ValueError`` naming what is wrong."""
    shape = '{"NAME": {"url": "http://…", "token": "…"}}'
    return parse_entries(raw, AgentApp, "app", shape)


def parse_mcp_servers(raw: str) -> dict[str, McpServer]:
    shape = '{"NAME": {"command": ["prog", "arg"]}} or {"NAME": {"url": "http://…/mcp"}}'
    return _named(parse_entries(raw, McpServer, "server", shape), "server")


def parse_openapi(raw: str) -> dict[str, OpenApi]:
    shape = '{"NAME": {"spec": "URL or path", "base_url": "http://…"}}'
    return _named(parse_entries(raw, OpenApi, "API", shape), "API")
