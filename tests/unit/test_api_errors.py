"""Every error the API answers is JSON ``{"detail"}`` (docs/http-api.md), also one no handler
foresaw: a 500 that names the error's kind and not its text, which may quote a stored value."""

from __future__ import annotations

import asyncio

import httpx

from worker.base.settings import load_settings
from worker.edges.http.app import create_api


def test_an_unforeseen_error_is_a_json_500_naming_its_kind_not_its_text() -> None:
    api = create_api(load_settings())

    @api.get("/boom")
    def boom() -> None:
        raise RuntimeError("secret-value-from-a-tool")

    async def ask() -> httpx.Response:
        transport = httpx.ASGITransport(app=api, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            return await client.get("/boom")

    answer = asyncio.run(ask())
    assert answer.status_code == 500
    assert answer.headers["content-type"].startswith("application/json")
    assert answer.json() == {"detail": "internal error (RuntimeError)"}
