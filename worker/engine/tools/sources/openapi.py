"""HTTP APIs' operations as dres tools (DRES_OPENAPI), from their OpenAPI documents (3.0, 3.1).

At a worker's start each document is read (a URL or a file) and every operation with an
``operationId`` (or those ``operations`` lists) becomes the tool ``NAME__operationId``. Its input
joins the operation's path, query and header parameters by name (not ``Idempotency-Key``, which
dres fills) and the properties of a JSON-object request body as top-level fields; any other body
is the field ``body``. Local ``$ref``s are resolved. ``GET``, ``HEAD``, ``OPTIONS`` are
read-only; ``PUT`` and ``DELETE`` idempotent writes (HTTP's semantics); ``POST`` and ``PATCH``
writes, idempotent only when the operation declares an ``Idempotency-Key`` header. Every write
request carries ``Idempotency-Key: <the call's idempotency_key>``.

A JSON answer is the result; a non-2xx one an error result with its status and a cut body. A
request that never left (connection refused, DNS) is an error result; a write sent whose answer
never came (a timeout, a dropped connection) raises ``OutcomeUnknown``: the call stays
interrupted.

What the model's input may not do (docs/security.md): the requests carry the operator's
``headers`` (an ``Authorization``), so a path parameter that is empty, ``.`` or ``..`` (also
percent-decoded), or that would make the request leave its operation's path (httpx removes dot
segments: ``/items/..`` is ``GET /``), is an error result naming the field, and nothing is sent;
a header parameter the operator configured is not an input at all (configured headers win). A
document fetched over HTTP(S) names no server: its entry's ``base_url`` does (checked at start).
"""

from __future__ import annotations

import importlib
import json
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import httpx
import structlog

from worker.base.errors import ConfigError, OutcomeUnknown
from worker.base.masking import mask_text, mask_url
from worker.base.tool_sources import OpenApi
from worker.engine.tools.context import ToolContext
from worker.engine.tools.sources import ToolCallFailed
from worker.engine.tools.spec import ToolSpec

log = structlog.get_logger("dres.openapi")

READS = frozenset({"get", "head", "options"})
IDEMPOTENT_WRITES = frozenset({"put", "delete"})
METHODS = READS | IDEMPOTENT_WRITES | {"post", "patch"}
IDEMPOTENCY_KEY = "Idempotency-Key"
#: characters of a non-2xx answer's body an error result keeps
BODY_CHARS = 500
#: seconds to connect, at most (a call's own ``timeout_s`` may be shorter)
CONNECT_S = 5.0
#: errors before a request left: nothing was sent
NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.UnsupportedProtocol)
#: path parameter values that are no segment of their own: empty, or a dot segment a URL's
#: normalisation removes together with the segment before it
NOT_A_SEGMENT = frozenset({"", ".", ".."})


#: the documents as read in this process, or in the worker's main process before the pool
#: forked (a child inherits them: the operations are fixed for the worker's life)
_documents: dict[tuple[str, str], dict[str, Any]] = {}


def load_document(name: str, api: OpenApi) -> dict[str, Any]:
    """The API's OpenAPI document, read once per worker; ``ConfigError`` naming the API when it
    cannot be read."""
    key = (name, api.model_dump_json())
    if key not in _documents:
        _documents[key] = _read(name, api)
    return _documents[key]


def _read(name: str, api: OpenApi) -> dict[str, Any]:
    try:
        if api.spec.startswith(("http://", "https://")):
            response = httpx.get(api.spec, headers=dict(api.headers), timeout=api.timeout_s)
            response.raise_for_status()
            text = response.text
        else:
            text = Path(api.spec).read_text()
        document = _parse(text)
    except (OSError, ValueError, httpx.HTTPError) as e:
        # the spec's URL masked, and httpx's message, which names it too (a status error's,
        # whose second line is a link to the status's page: one line is kept)
        where, why = mask_url(api.spec), mask_text(str(e).partition("\n")[0])
        raise ConfigError(f"DRES_OPENAPI: API {name!r}: cannot read {where}: {why}") from None
    if not isinstance(document, dict) or not str(document.get("openapi", "")).startswith("3."):
        raise ConfigError(
            f"DRES_OPENAPI: API {name!r}: {mask_url(api.spec)} is not an OpenAPI 3 document"
        )
    return document


def _parse(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        try:
            yaml: Any = importlib.import_module("yaml")  # optional: YAML needs PyYAML
        except ImportError:
            raise ValueError("not JSON (a YAML document needs PyYAML installed)") from None
        return yaml.safe_load(text)


def resolve(node: Any, root: Mapping[str, Any], seen: tuple[str, ...] = ()) -> Any:
    """``node`` with its local ``$ref``s replaced by what they name; a ref inside itself (a
    recursive schema) becomes ``{}`` (any value) at the point it recurs."""
    if isinstance(node, list):
        return [resolve(item, root, seen) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str):
        if ref in seen or not ref.startswith("#/"):
            return {}
        target: Any = root
        for part in ref[2:].split("/"):
            target = target[part.replace("~1", "/").replace("~0", "~")]
        return resolve(target, root, (*seen, ref))
    return {k: resolve(v, root, seen) for k, v in node.items()}


@dataclass(frozen=True)
class Operation:
    """What a call of one operation sends."""

    method: str
    path: str
    #: (name, where) of its parameters: ``path``, ``query`` or ``header``
    params: tuple[tuple[str, str], ...]
    #: the body's top-level fields (a JSON object body)
    body_fields: tuple[str, ...] = ()
    #: any other body: the input's field ``body`` is sent as it is
    body_whole: bool = False
    write: bool = True
    #: the body's media type: JSON, or another one whose body is sent as text
    media: str = "application/json"


def operation_tool(
    name: str,
    op_id: str,
    method: str,
    path: str,
    op: dict[str, Any],
    shared: list[Any],
    configured: frozenset[str] = frozenset(),
) -> tuple[Operation, dict[str, Any], bool]:
    """One operation's call plan, input schema and idempotency; a header parameter named in
    ``configured`` (the operator's headers, lower case) is no input: the operator's value is
    sent."""
    params: dict[tuple[str, str], dict[str, Any]] = {}
    for p in [*shared, *op.get("parameters", [])]:  # the operation's own win over the path's
        params[(p["name"], p["in"])] = p
    declares_key = any(
        n.lower() == IDEMPOTENCY_KEY.lower() and where == "header" for n, where in params
    )
    properties: dict[str, Any] = {}
    required: list[str] = []
    plan: list[tuple[str, str]] = []
    for (pname, where), p in params.items():
        if where not in {"path", "query", "header"} or pname.lower() == IDEMPOTENCY_KEY.lower():
            continue
        if where == "header" and pname.lower() in configured:
            continue
        plan.append((pname, where))
        properties[pname] = {**p.get("schema", {}), **_described(p)}
        if p.get("required") or where == "path":
            required.append(pname)
    body_fields: tuple[str, ...] = ()
    whole = False
    media = "application/json"
    body = op.get("requestBody")
    if body:
        content = body.get("content", {})
        json_media = next((m for m in content if _is_json(m)), None)
        media = json_media or next(iter(content), "application/json")
        schema = content.get(media, {}).get("schema", {})
        if json_media and (schema.get("type") == "object" or "properties" in schema):
            clash = sorted(set(schema.get("properties", {})) & set(properties))
            if clash:
                raise ConfigError(
                    f"DRES_OPENAPI: API {name!r}: {op_id}: body fields {clash} clash "
                    "with parameters of the same name"
                )
            properties.update(schema.get("properties", {}))
            body_fields = tuple(schema.get("properties", {}))
            required += list(schema.get("required", [])) if body.get("required") else []
        else:
            properties["body"], whole = schema, True
            required += ["body"] if body.get("required") else []
    input_schema = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        input_schema["required"] = required
    write = method not in READS
    idempotent = method in IDEMPOTENT_WRITES or (write and declares_key)
    operation = Operation(method, path, tuple(plan), body_fields, whole, write, media)
    return operation, input_schema, idempotent


def _is_json(media: str) -> bool:
    return media.split(";")[0].strip().endswith("json")


def _described(p: dict[str, Any]) -> dict[str, Any]:
    return {"description": p["description"]} if p.get("description") else {}


def api_tools(name: str, api: OpenApi, document: dict[str, Any]) -> list[ToolSpec]:
    """The document's operations (``api.operations``'s only, when given) as ``ToolSpec``s."""
    doc = resolve(document, document)
    client = ApiClient(name, base_url(name, api, doc), api)
    configured = frozenset(h.lower() for h in api.headers)
    specs: list[ToolSpec] = []
    for path, item in doc.get("paths", {}).items():
        shared = item.get("parameters", [])
        for method, op in item.items():
            op_id = op.get("operationId") if method in METHODS else None
            if not op_id or (api.operations is not None and op_id not in api.operations):
                continue
            plan, schema, idempotent = operation_tool(
                name, op_id, method, path, op, shared, configured
            )
            specs.append(
                ToolSpec(
                    name=f"{name}__{op_id}",
                    fn=OpenApiTool(client, plan),
                    description=op.get("description") or op.get("summary") or op_id,
                    json_schema=schema,
                    read_only=not plan.write,
                    idempotent=idempotent,
                    source=f"openapi {name}",
                )
            )
    missing = sorted(set(api.operations or ()) - {s.name.split("__", 1)[1] for s in specs})
    if missing:
        raise ConfigError(f"DRES_OPENAPI: API {name!r} has no operations {missing}")
    return specs


def base_url(name: str, api: OpenApi, doc: dict[str, Any]) -> str:
    """Where the operations are sent: the entry's ``base_url``; for a document read from a file
    (the operator's own) its first absolute ``servers`` URL may stand in. A fetched document's
    entry always has one (``OpenApi`` refuses it without)."""
    if api.base_url:
        return api.base_url
    servers = doc.get("servers") or []
    url = str(servers[0].get("url", "")) if servers else ""
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"DRES_OPENAPI: API {name!r}: give base_url (the document has none)")
    return str(url)


@dataclass(frozen=True)
class OpenApiTool:
    """One operation's ``fn``: called as ``fn(input, ctx)``."""

    client: ApiClient
    operation: Operation

    def __call__(self, arguments: dict[str, Any], ctx: ToolContext) -> Any:
        return self.client.send(self.operation, arguments, ctx.idempotency_key)


@dataclass
class ApiClient:
    """One API's ``httpx.Client`` in this process (made after the fork, on first use)."""

    name: str
    base_url: str
    api: OpenApi
    _pid: int = 0
    _client: httpx.Client | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def client(self) -> httpx.Client:
        with self._lock:
            if self._client is None or self._pid != os.getpid():
                timeout = httpx.Timeout(
                    self.api.timeout_s, connect=min(CONNECT_S, self.api.timeout_s)
                )
                self._client = httpx.Client(
                    base_url=self.base_url.rstrip("/"),
                    headers=dict(self.api.headers),
                    timeout=timeout,
                )
                self._pid = os.getpid()
            return self._client

    def parameters(
        self, op: Operation, arguments: dict[str, Any], where: str
    ) -> tuple[str, dict[str, Any], dict[str, str]]:
        """The request's path, query and headers from the input's parameters; a path value
        that is no segment of its own raises (nothing is sent)."""
        path, query, headers = op.path, {}, {}
        configured = {h.lower() for h in self.api.headers}
        for pname, kind in op.params:
            if pname not in arguments:
                continue
            value = str(arguments[pname])
            if kind == "path":
                if value in NOT_A_SEGMENT or unquote(value) in NOT_A_SEGMENT:
                    raise ToolCallFailed(f"{where}: not sent: {pname}: not a path segment")
                path = path.replace("{" + pname + "}", quote(value, safe=""))
            elif kind == "query":
                query[pname] = arguments[pname]
            elif pname.lower() not in configured:  # the operator's headers win
                headers[pname] = value
        return path, query, headers

    def send(self, op: Operation, arguments: dict[str, Any], key: str) -> Any:
        # ``where`` names the operation's path template, never the input's values: the message
        # is an error result and may be logged
        where = f"API {self.name!r}: {op.method.upper()} {op.path}"
        path, query, headers = self.parameters(op, arguments, where)
        if op.write:
            headers[IDEMPOTENCY_KEY] = key
        body: Any = None
        if op.body_whole:
            body = arguments.get("body")
        elif op.body_fields:
            body = {f: arguments[f] for f in op.body_fields if f in arguments}
        content: dict[str, Any] = {"json": body}
        if body is not None and not _is_json(op.media):
            content = {"content": body if isinstance(body, str) else json.dumps(body)}
            headers["Content-Type"] = op.media
        client = self.client()
        request = client.build_request(
            op.method.upper(), path, params=query, headers=headers, **content
        )
        if not _keeps_path(client, path, request.url):
            fields = [p for p, kind in op.params if kind == "path" and p in arguments]
            raise ToolCallFailed(f"{where}: not sent: {', '.join(fields)}: leaves the path")
        try:
            response = client.send(request)
        except NOT_SENT as e:
            why = mask_text(f"{type(e).__name__}: {e}")
            raise ToolCallFailed(f"{where}: not sent: {why}") from None
        except httpx.TransportError as e:
            message = f"{where}: no answer: {mask_text(f'{type(e).__name__}: {e}')}"
            if op.write:
                raise OutcomeUnknown(message) from None
            raise ToolCallFailed(message) from None
        return answer(where, response)


def _keeps_path(client: httpx.Client, path: str, url: httpx.URL) -> bool:
    """Whether the URL httpx made has the path asked for (its normalisation removes the dot
    segments the values may make, and the segment before each ``..``)."""
    base = client.base_url.raw_path.decode("ascii").rstrip("/")
    return unquote(url.raw_path.decode("ascii").split("?", 1)[0]) == unquote(base + path)


def answer(where: str, response: httpx.Response) -> Any:
    """A 2xx answer's JSON (its text when not JSON); a non-2xx one raises with a cut body."""
    if not response.is_success:
        body = response.text[:BODY_CHARS]
        raise ToolCallFailed(f"{where}: HTTP {response.status_code}: {body}")
    if not response.content:
        return {"status": response.status_code}
    try:
        return response.json()
    except ValueError:
        return response.text


def openapi_tools(apis: Mapping[str, OpenApi]) -> list[ToolSpec]:
    """DRES_OPENAPI's operations, each document read now."""
    specs: list[ToolSpec] = []
    for name, api in apis.items():
        found = api_tools(name, api, load_document(name, api))
        log.info("OpenAPI operations loaded", api=name, tools=[s.name for s in found])
        specs += found
    return specs
