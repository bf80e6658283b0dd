"""What every router of the API shares: the token check and the request's runtime and reader."""

from __future__ import annotations

import hmac
from typing import Annotated

import redis.asyncio as aioredis
from fastapi import Depends, Header, Path, Request
from starlette.exceptions import HTTPException

from ledger import keys
from ledger.errors import UnknownTurn
from ledger.turn import TurnMeta
from worker.edges.http.schemas import ID
from worker.edges.runtime import Runtime


async def authorize(
    request: Request, authorization: Annotated[str | None, Header()] = None
) -> None:
    token = request.app.state.settings.api_token
    if not token:
        return
    scheme, _, given = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.encode(), token.encode()):
        raise HTTPException(401, "a valid bearer token is required", {"WWW-Authenticate": "Bearer"})


def runtime_of(request: Request) -> Runtime:
    rt: Runtime = request.app.state.rt
    return rt


def reader_of(request: Request) -> aioredis.Redis:
    reader: aioredis.Redis = request.app.state.reader
    return reader


RT = Annotated[Runtime, Depends(runtime_of)]
Reader = Annotated[aioredis.Redis, Depends(reader_of)]
TurnId = Annotated[str, Path(pattern=ID, description="the turn's id")]


async def meta_of(reader: aioredis.Redis, turn_id: str) -> TurnMeta:
    raw = await reader.hgetall(keys.turn_meta(turn_id))
    if not raw:
        raise UnknownTurn(turn_id)
    return TurnMeta.from_hash(turn_id, raw)
