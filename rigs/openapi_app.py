"""A real HTTP API for the tests: a FastAPI app serving its own OpenAPI document
(``/openapi.json``), run by uvicorn as a subprocess on a free loopback port (``ApiServer``).

Every request it receives is appended to a JSON-lines log (``DRES_TEST_API_LOG``): method, path,
its ``Idempotency-Key`` and ``Authorization`` headers and its body, so a test sees what the server
saw; a request no operation answers (a path that left its operation's) is logged as the
operation ``unrouted``.

Operations: ``get_item`` (GET), ``create_item`` (POST, no Idempotency-Key: a plain write; the
name ``conflict`` answers 409), ``put_item`` (PUT: idempotent; a name starting ``slow`` makes its
first request sleep past any client timeout after doing its work), ``create_slowly`` (POST that
does its work, then never answers in time), ``create_order`` (POST declaring an
``Idempotency-Key`` header: idempotent), ``read_note`` (GET declaring the header parameters
``X-Note-Key`` and ``Authorization``).

``python -m rigs.openapi_app PORT``.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI, Header, HTTPException, Request
from pydantic import BaseModel

from rigs.hangs import HANG_S, hang_if_asked
from rigs.processes import ROOT
from rigs.waiting import wait_until
from worker.dev.redis_server import free_port

LOG_VAR = "DRES_TEST_API_LOG"
#: the environment variable naming a flag file: while it exists, the next write hangs
HANG_VAR = "DRES_TEST_API_HANG"
#: the server its document names (``servers``): nothing listens there
ELSEWHERE = "http://127.0.0.1:9/elsewhere"


def requests(log: Path, operation: str | None = None) -> list[dict[str, Any]]:
    """What the server saw, in order (one operation's requests only, when given)."""
    if not log.exists():
        return []
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return [r for r in rows if operation is None or r["operation"] == operation]


class Item(BaseModel):
    name: str
    qty: int = 1


class Order(BaseModel):
    sku: str


def build_app(log: Path) -> FastAPI:
    # its document names a server that is not this one: the entry's base_url must win
    app = FastAPI(title="dres test API", servers=[{"url": ELSEWHERE}])
    items: dict[str, dict[str, Any]] = {}
    slow_done: set[str] = set()

    def record(operation: str, request: Request, body: Any = None) -> None:
        row = {
            "operation": operation,
            "method": request.method,
            "path": request.url.path,
            "key": request.headers.get("idempotency-key"),
            "auth": request.headers.get("authorization"),
            "body": body,
        }
        request.state.recorded = True
        with log.open("a") as f:
            f.write(json.dumps(row) + "\n")

    @app.middleware("http")
    async def record_unrouted(request: Request, call_next: Any) -> Any:
        response = await call_next(request)
        documents = {app.openapi_url, app.docs_url, app.redoc_url}
        if not getattr(request.state, "recorded", False) and request.url.path not in documents:
            record("unrouted", request)
        return response

    @app.get("/items/{item_id}", operation_id="get_item")
    async def get_item(item_id: str, request: Request) -> dict[str, Any]:
        """Read an item."""
        record("get_item", request)
        return items.get(item_id, {"item_id": item_id, "missing": True})

    @app.post("/items", operation_id="create_item")
    async def create_item(item: Item, request: Request) -> dict[str, Any]:
        """Create an item (a plain write)."""
        record("create_item", request, item.model_dump())
        if item.name == "conflict":
            raise HTTPException(409, "an item named conflict exists")
        item_id = f"it_{len(items) + 1}"
        items[item_id] = {"item_id": item_id, **item.model_dump()}
        await hang_if_asked(HANG_VAR)
        return items[item_id]

    @app.put("/items/{item_id}", operation_id="put_item")
    async def put_item(item_id: str, item: Item, request: Request) -> dict[str, Any]:
        """Replace an item (idempotent)."""
        record("put_item", request, item.model_dump())
        items[item_id] = {"item_id": item_id, **item.model_dump()}
        if item.name.startswith("slow") and item_id not in slow_done:
            slow_done.add(item_id)
            await asyncio.sleep(HANG_S)
        await hang_if_asked(HANG_VAR)
        return items[item_id]

    @app.post("/slow", operation_id="create_slowly")
    async def create_slowly(item: Item, request: Request) -> dict[str, Any]:
        """Create an item, then take very long to answer."""
        record("create_slowly", request, item.model_dump())
        await asyncio.sleep(HANG_S)
        return {"created": True}

    @app.post("/orders", operation_id="create_order")
    async def create_order(
        order: Order,
        request: Request,
        idempotency_key: str | None = Header(None, alias="Idempotency-Key"),
    ) -> dict[str, Any]:
        """Place an order (deduplicated on its Idempotency-Key)."""
        record("create_order", request, order.model_dump())
        return {"order": order.sku, "key": idempotency_key}

    @app.get("/notes/{note_id}", operation_id="read_note")
    async def read_note(
        note_id: str,
        request: Request,
        note_key: str | None = Header(None, alias="X-Note-Key"),
        authorization: str | None = Header(None, alias="Authorization"),
    ) -> dict[str, Any]:
        """Read a note (its key and the caller's credentials in headers)."""
        record("read_note", request)
        return {"note_id": note_id, "note_key": note_key, "authorization": authorization}

    return app


@dataclass
class ApiServer:
    """The app under uvicorn, a subprocess on a free loopback port."""

    log: Path
    port: int = field(default_factory=free_port)
    process: Any = None
    #: a flag file: while it exists, the server's next write hangs after its work
    hang: Path | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def entry(self, **options: Any) -> dict[str, Any]:
        """A ``DRES_OPENAPI`` entry for this server (a fetched document needs its base URL)."""
        return {"spec": f"{self.url}/openapi.json", "base_url": self.url, **options}

    def start(self) -> ApiServer:
        env = {**os.environ, LOG_VAR: str(self.log), "PYTHONPATH": str(ROOT)}
        if self.hang is not None:
            env[HANG_VAR] = str(self.hang)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "rigs.openapi_app", str(self.port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        wait_until(self._answers, timeout=20, what=f"the test API on port {self.port}")
        return self

    def _answers(self) -> bool:
        try:
            return httpx.get(f"{self.url}/openapi.json", timeout=0.5).status_code == 200
        except httpx.TransportError:
            if self.process.poll() is not None:
                raise AssertionError("the test API exited at start") from None
            return False

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


def main(port: int) -> None:
    import uvicorn

    uvicorn.run(
        build_app(Path(os.environ[LOG_VAR])), host="127.0.0.1", port=port, log_level="warning"
    )


if __name__ == "__main__":
    main(int(sys.argv[1]))
