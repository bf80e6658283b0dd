"""Tools from elsewhere, the parts that need no server: DRES_MCP_SERVERS and DRES_OPENAPI at
start, an MCP tool's classification by its hints, an OpenAPI operation's input and kind, and the
JSON-schema check that names the field (docs/configuration.md, docs/tools.md)."""

from __future__ import annotations

from typing import Any

import pytest
from mcp import types as mcp_types

from worker.base.errors import ConfigError
from worker.base.settings import load_settings
from worker.base.tool_sources import McpServer, OpenApi
from worker.engine.tools.schema_input import SchemaInput
from worker.engine.tools.sources.mcp import classify, server_tools
from worker.engine.tools.sources.openapi import api_tools, resolve


@pytest.mark.parametrize(
    ("variable", "raw", "says"),
    [
        ("mcp_servers", "{", "DRES_MCP_SERVERS: not JSON"),
        ("mcp_servers", "[]", "DRES_MCP_SERVERS: must be a JSON object"),
        ("mcp_servers", '{"a": {}}', "DRES_MCP_SERVERS: server 'a': entry: give either command"),
        ("mcp_servers", '{"a": {"url": "ftp://x"}}', "server 'a': url: must be an http"),
        ("mcp_servers", '{"a__b": {"url": "http://x"}}', "server 'a__b': a name is letters"),
        (
            "mcp_servers",
            '{"a": {"url": "http://x", "read_only": ["t"], "writes": ["t"]}}',
            "tools both read_only and writes: ['t']",
        ),
        ("openapi", '{"api": {"base_url": "http://x"}}', "DRES_OPENAPI: API 'api': spec: missing"),
        ("openapi", '{"api": {"spec": "x", "timeout_s": 0}}', "API 'api': timeout_s:"),
    ],
)
def test_bad_tool_sources_fail_at_start_with_one_line_naming_the_variable(
    variable: str, raw: str, says: str
) -> None:
    with pytest.raises(ConfigError) as e:
        load_settings(**{variable: raw})
    assert says in str(e.value) and "\n" not in str(e.value)


def tool(name: str, **hints: Any) -> mcp_types.Tool:
    annotations = mcp_types.ToolAnnotations(**hints) if hints else None
    schema = {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}
    return mcp_types.Tool(name=name, input_schema=schema, annotations=annotations)


def test_mcp_hints_classify_with_the_specs_defaults_and_the_operators_lists_win() -> None:
    server = McpServer(url="http://x/mcp")
    assert classify(tool("r", read_only_hint=True), server) == (True, False)
    assert classify(tool("w"), server) == (False, False)  # no hints: a write, not idempotent
    assert classify(tool("w", read_only_hint=False), server) == (False, False)
    assert classify(tool("i", idempotent_hint=True), server) == (False, True)
    # a read-only tool is never idempotent (nothing to repeat)
    assert classify(tool("r", read_only_hint=True, idempotent_hint=True), server) == (True, False)
    overriding = McpServer(url="http://x/mcp", read_only=("w",), writes=("r",), idempotent=("r",))
    assert classify(tool("w"), overriding) == (True, False)
    assert classify(tool("r", read_only_hint=True), overriding) == (False, True)


def test_an_override_naming_no_tool_of_the_server_fails_at_start() -> None:
    server = McpServer(url="http://x/mcp", writes=("typo",))
    with pytest.raises(ConfigError, match=r"server 's' has no tools \['typo'\]"):
        server_tools("s", server, [tool("w")])


def test_mcp_tool_names_are_prefixed_and_made_safe_for_providers() -> None:
    [spec] = server_tools("s", McpServer(url="http://x/mcp"), [tool("files.read/v2")])
    assert spec.name == "s__files_read_v2" and spec.source == "mcp s"


DOCUMENT: dict[str, Any] = {
    "openapi": "3.1.0",
    "servers": [{"url": "http://api.example/v1"}],
    "components": {
        "schemas": {
            "Item": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "tags": {"$ref": "#/components/schemas/Tags"},
                },
                "required": ["name"],
            },
            "Tags": {"type": "array", "items": {"type": "string"}},
            "Node": {
                "type": "object",
                "properties": {"next": {"$ref": "#/components/schemas/Node"}},
            },
        },
        "parameters": {
            "Key": {"name": "Idempotency-Key", "in": "header", "schema": {"type": "string"}}
        },
    },
    "paths": {
        "/items/{id}": {
            "parameters": [{"name": "id", "in": "path", "schema": {"type": "string"}}],
            "get": {
                "operationId": "getItem",
                "parameters": [{"name": "v", "in": "query", "schema": {"type": "integer"}}],
            },
            "put": {
                "operationId": "putItem",
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {"schema": {"$ref": "#/components/schemas/Item"}}
                    },
                },
            },
            "delete": {"operationId": "deleteItem"},
        },
        "/items": {
            "post": {
                "operationId": "createItem",
                "requestBody": {
                    "content": {
                        "application/json": {"schema": {"$ref": "#/components/schemas/Item"}}
                    }
                },
            },
            "patch": {
                "operationId": "patchItems",
                "parameters": [{"$ref": "#/components/parameters/Key"}],
            },
        },
        "/upload": {
            "post": {
                "operationId": "upload",
                "requestBody": {
                    "required": True,
                    "content": {"text/plain": {"schema": {"type": "string"}}},
                },
            },
            "options": {"operationId": "uploadOptions"},
            "head": {"summary": "no operationId: not a tool"},
        },
    },
}


def test_openapi_operations_become_tools_by_method_and_declared_key() -> None:
    specs = {s.name: s for s in api_tools("a", OpenApi(spec="doc.json"), DOCUMENT)}
    kinds = {n: (s.read_only, s.idempotent) for n, s in specs.items()}
    assert kinds == {
        "a__getItem": (True, False),
        "a__putItem": (False, True),
        "a__deleteItem": (False, True),
        "a__createItem": (False, False),
        "a__patchItems": (False, True),  # declares an Idempotency-Key header
        "a__upload": (False, False),
        "a__uploadOptions": (True, False),
    }
    put = specs["a__putItem"].schema
    assert set(put["properties"]) == {"id", "name", "tags"}
    assert put["properties"]["tags"] == {"type": "array", "items": {"type": "string"}}
    assert set(put["required"]) == {"id", "name"} and put["additionalProperties"] is False
    assert specs["a__createItem"].schema.get("required") is None  # the body is optional
    assert specs["a__patchItems"].schema["properties"] == {}  # Idempotency-Key is dres's
    assert specs["a__upload"].schema["properties"] == {"body": {"type": "string"}}
    assert specs["a__getItem"].schema["required"] == ["id"]


def test_an_allow_list_registers_only_its_operations_and_names_a_missing_one() -> None:
    only = OpenApi(spec="doc.json", operations=("getItem",))
    assert [s.name for s in api_tools("a", only, DOCUMENT)] == ["a__getItem"]
    with pytest.raises(ConfigError, match=r"has no operations \['nope'\]"):
        api_tools("a", OpenApi(spec="doc.json", operations=("nope",)), DOCUMENT)


def test_a_recursive_ref_resolves_to_any_value_where_it_recurs() -> None:
    node = resolve(DOCUMENT["components"]["schemas"]["Node"], DOCUMENT)
    assert node == {
        "type": "object",
        "properties": {"next": {"type": "object", "properties": {"next": {}}}},
    }


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ({}, "name: Field required"),
        ({"name": 3}, "name: 3 is not of type 'string'"),
        ({"name": "n", "extra": 1}, "extra: Extra inputs are not permitted"),
        ({"name": "n", "tags": ["a", 2]}, "tags.1: 2 is not of type 'string'"),
    ],
)
def test_a_json_schema_check_names_the_field(raw: dict[str, Any], says: str) -> None:
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["name"],
        "additionalProperties": False,
    }
    assert SchemaInput(schema).check(raw) == says
