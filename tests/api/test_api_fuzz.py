"""Property-based fuzzing of the API's own OpenAPI document (schemathesis) finds no 5xx.

Every operation is fuzzed on the running ``dres api`` with schema-valid (positive) and
schema-violating (negative) requests with random turn ids, and Continue and Stop also with the
id of a real turn (a crashed stop), so that they reach the ledger. Only the
``not_a_server_error`` check runs: a 4xx is a fine answer to anything, a 5xx never is. The event
stream is left out: on a real turn it streams until the turn ends, and its bad input is tested
in ``test_api_requests``; so are the chat front ends' routes that start a turn and stream it
(no worker runs here: their turns never end), and the chat's reconnect, which streams a turn the
fuzzed ``POST /v1/turns`` left queued in the conversation it names (``0``, say) until it ends:
their bad input ``test_api_chat`` tests and ``test_api_schemathesis`` fuzzes them on a real
worker.
"""

from __future__ import annotations

from typing import Any

import requests
import schemathesis
from api_support import serve
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from pydantic import BaseModel
from schemathesis import APIOperation, GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup

from rigs import ApiProcess, crashed_stop
from worker.edges.runtime import Runtime

#: examples per operation, generation mode and kind of turn id (keeps the test well under 60 s)
MAX_EXAMPLES = 30
#: seconds one fuzzed request may take
CALL_TIMEOUT_S = 10
STREAMING = "/v1/turns/{turn_id}/events"
#: the routes that stream a turn to its end (those that start one, and the chat's reconnect)
TURN_STREAMS = {STREAMING, "/v1/chat", "/v1/chat/{chat_id}/stream", "/v1/ag-ui"}


def fuzz(operation: APIOperation, base_url: str, **path: str) -> list[str]:
    """Run the operation's examples in both modes; the failures, each with its reproduction."""
    failures = []
    session = requests.Session()  # one keep-alive connection for all the examples
    # With the turn id fixed, only a body is left to make invalid.
    modes = [m for m in GenerationMode if not path or operation.body or m.value == "positive"]
    for mode in modes:
        strategy = operation.as_strategy(generation_mode=mode, path_parameters=path or None)

        @settings(
            max_examples=MAX_EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=strategy)
        def run(case: Any) -> None:
            response = case.call(base_url=base_url, session=session, timeout=CALL_TIMEOUT_S)
            case.validate_response(response, checks=[not_a_server_error])

        try:
            run()
        except Unsatisfiable:
            # Nothing of the request can be made invalid (no parameters, or fixed ones only).
            assert mode is GenerationMode.NEGATIVE, operation.label
        except (Exception, FailureGroup) as e:  # all operations run; failures reported together
            failures.append(f"{operation.label} [{mode.value}, {path or 'random ids'}]: {e}")
    session.close()
    return failures


def test_fuzzing_the_openapi_document_finds_no_server_error(
    api: ApiProcess, runtime: Runtime
) -> None:
    schema = schemathesis.openapi.from_url(f"{api.url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    paths = {op.path for op in operations}
    assert {"/v1/turns", "/v1/turns/{turn_id}", "/healthz", STREAMING} <= paths, paths
    # Continue acts on the crashed stop (queuing it again), then Stop cancels it.
    stopped = crashed_stop(runtime)

    failures: list[str] = []
    for operation in operations:
        if operation.path in TURN_STREAMS:
            continue
        failures += fuzz(operation, api.url)
        if "{turn_id}" in operation.path and operation.method.upper() == "POST":
            failures += fuzz(operation, api.url, turn_id=stopped)

    assert not failures, "\n\n".join(failures)


class Order(BaseModel):
    quantity: int


def test_the_fuzzing_reports_a_server_error_when_there_is_one() -> None:
    """The harness above can fail: on an app that answers 500 to some valid input, it does."""
    app = FastAPI()

    @app.post("/orders")
    def order(body: Order) -> JSONResponse:
        return JSONResponse({"detail": "boom"}, 500 if body.quantity > 10 else 200)

    with serve(app) as url:
        schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
        (operation,) = [result.ok() for result in schema.get_all_operations()]
        failures = fuzz(operation, url)
    assert failures and "500" in failures[0], failures
