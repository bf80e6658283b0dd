"""The API's OpenAPI document, completed where FastAPI cannot say it from the signatures alone.

- ``Last-Event-ID`` and ``?after=`` are a stream id (``3-14``, or ``3`` for ``3-0`` as Redis reads
  it): the route checks them itself so a bad one is a 400 naming it; the document gives the form.
- ``model`` is one of the specs this server admits (its default, the ``DRES_MODELS`` entries,
  ``PROVIDER:*`` as a pattern), so a client (or a fuzzer) knows a spec it may send.
- Links: what a response's ids lead to (OpenAPI ``links``), from ``POST /v1/turns`` to the turn's
  status, events, journal, Continue and Stop and to its conversation (to read it, as the chat's
  messages too, or delete it);
  from a turn's status, Stop and Continue to the next step of the turn. A listing's items have
  no links: OpenAPI links name one value, and a page may be empty.

Every 4xx and 5xx body is the one ``Error`` schema (``{"detail": …}``).
"""

from __future__ import annotations

from typing import Any

from fastapi import Depends, FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute

from ledger.ids import STREAM_ID
from worker.base.settings import Settings
from worker.edges.http.deps import authorize
from worker.edges.http.models import default_spec
from worker.engine.models import PROVIDERS
from worker.engine.models.allow import ANY, parse_allowed

#: a stream id as a client may give it: exactly ``N-N`` (``ledger.ids``; the route checks the
#: same form; the document says it, so a fuzzer generates within it)
STREAM_ID_PATTERN = STREAM_ID
#: a stream id, as the SSE ``id`` of each event
STREAM_ID_SCHEMA = {
    "type": "string",
    "pattern": STREAM_ID_PATTERN,
    "examples": ["3-14"],
    "description": "a stream id, exactly as each event's SSE id (N-N); each part at most 19 digits",
}
#: the prefix of a spec that names a script file on the server (docs/models.md)
SCRIPTED = "scripted:"
TURN = "$response.body#/turn_id"
CONVERSATION = "$response.body#/conversation_id"


def operation_id(route: APIRoute) -> str:
    """An operation's id is its function's name (``create_turn``): what links name."""
    return route.name


def _links(*targets: tuple[str, str, dict[str, str]]) -> dict[str, Any]:
    return {
        name: {"operationId": op, "parameters": params, "description": f"{op} of this answer"}
        for name, op, params in targets
    }


#: (method, path, status) -> the links of that response
LINKS: dict[tuple[str, str, str], dict[str, Any]] = {
    ("post", "/v1/turns", "202"): _links(
        ("Status", "turn_status", {"turn_id": TURN}),
        ("Events", "events", {"turn_id": TURN}),
        ("Journal", "journal", {"turn_id": TURN}),
        ("Continue", "continue_turn", {"turn_id": TURN}),
        ("Stop", "stop_turn", {"turn_id": TURN}),
        ("Conversation", "conversation", {"conversation_id": CONVERSATION}),
        ("ChatMessages", "chat_messages", {"chat_id": CONVERSATION}),
        ("DeleteConversation", "delete_conversation", {"conversation_id": CONVERSATION}),
    ),
    ("post", "/v1/turns/{turn_id}/stop", "202"): _links(
        ("Status", "turn_status", {"turn_id": TURN}),
        ("Continue", "continue_turn", {"turn_id": TURN}),
        ("Journal", "journal", {"turn_id": TURN}),
    ),
    ("post", "/v1/turns/{turn_id}/continue", "202"): _links(
        ("Status", "turn_status", {"turn_id": TURN}),
        ("Stop", "stop_turn", {"turn_id": TURN}),
        ("Events", "events", {"turn_id": TURN}),
    ),
    ("get", "/v1/turns/{turn_id}", "200"): _links(
        ("Continue", "continue_turn", {"turn_id": TURN}),
        ("Stop", "stop_turn", {"turn_id": TURN}),
        ("Conversation", "conversation", {"conversation_id": CONVERSATION}),
    ),
}


def model_forms(settings: Settings) -> list[dict[str, Any]]:
    """The specs this server admits from a client: its default and the ``DRES_MODELS`` entries
    by name, and every model of a provider listed as ``PROVIDER:*``. A ``scripted:`` spec is
    left out: it names a file on the server, which is no reader's business."""
    allowed = parse_allowed(settings.models)
    named = {default_spec(settings)} | {s for s in allowed if not s.endswith(":" + ANY)}
    exact = sorted(s for s in named if not s.startswith(SCRIPTED))
    forms: list[dict[str, Any]] = [{"type": "string", "enum": exact}] if exact else []
    for provider in sorted(PROVIDERS):
        if f"{provider}:{ANY}" in allowed:
            forms.append({"type": "string", "pattern": rf"^{provider}:[^*\s]+$"})
    return forms


def build_document(api: FastAPI, settings: Settings) -> dict[str, Any]:
    document = get_openapi(
        title=api.title,
        version=api.version,
        description=api.description,
        routes=api.routes,
    )
    paths = document["paths"]
    for (method, path, status), links in LINKS.items():
        paths[path][method]["responses"][status]["links"] = links
    for param in paths["/v1/turns/{turn_id}/events"]["get"]["parameters"]:
        if param["name"] in ("after", "last-event-id"):
            param["schema"] = dict(STREAM_ID_SCHEMA)
    schemas = document["components"]["schemas"]
    for model in (
        schemas["TurnRequest"]["properties"]["model"],
        schemas["ChatRequest"]["properties"]["model"],
        schemas["ForkRequest"]["properties"]["model"],
        schemas["ScheduleRequest"]["properties"]["model"],
    ):
        model["anyOf"] = [*model_forms(settings), {"type": "null"}]
        model.pop("maxLength", None)
    # a turn's loop: one of this server's DRES_LOOP entries, by its text (docs/loops.md)
    loop = schemas["TurnRequest"]["properties"]["loop"]
    loop["anyOf"] = [{"type": "string", "enum": [str(s) for s in settings.loops]}, {"type": "null"}]
    loop.pop("maxLength", None)
    # an optional message is a string when given (absent: the forked turn's own); a nullable
    # string of a maximum length is one the fuzzers cannot negate (they would need a string
    # longer than they make)
    message = schemas["ForkRequest"]["properties"]["message"]
    text = next(form for form in message.pop("anyOf") if form.get("type") == "string")
    message.update(text)
    forwarded = schemas["RunAgentInput"]["properties"]["forwardedProps"]
    forwarded["anyOf"][0]["properties"] = {
        "model": {"anyOf": [*model_forms(settings), {"type": "null"}]}
    }
    return document


def install_document(api: FastAPI, settings: Settings) -> None:
    """Serve ``build_document`` (built once, on first ask) at ``/openapi.json``, behind the token
    when one is set, as every read is."""

    def openapi() -> dict[str, Any]:
        if api.openapi_schema is None:
            api.openapi_schema = build_document(api, settings)
        return api.openapi_schema

    def openapi_json() -> JSONResponse:
        return JSONResponse(api.openapi())

    api.openapi = openapi  # type: ignore[method-assign]
    api.add_api_route(
        "/openapi.json",
        openapi_json,
        methods=["GET"],
        dependencies=[Depends(authorize)],
        include_in_schema=False,
    )
