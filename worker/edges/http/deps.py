"""What every router of the API shares: the token checks (docs/http-api.md, "Who may call") and
the request's runtime and reader."""

from __future__ import annotations

import hmac
from typing import Annotated

import redis.asyncio as aioredis
from fastapi import Depends, Header, Path, Request
from starlette.exceptions import HTTPException

from ledger import keys
from ledger.errors import UnknownTurn
from ledger.ids import ID
from ledger.turn import TurnMeta
from worker.base.settings import Settings
from worker.edges.runtime import Runtime

#: the methods that only read: an approver's token is accepted on these (and on decisions)
READS = frozenset({"GET", "HEAD"})


def _unauthorized() -> HTTPException:
    return HTTPException(401, "a valid bearer token is required", {"WWW-Authenticate": "Bearer"})


def bearer(authorization: str | None) -> str:
    scheme, _, given = (authorization or "").partition(" ")
    return given if scheme.lower() == "bearer" else ""


def _same(given: str, token: str) -> bool:
    return hmac.compare_digest(given.encode(), token.encode())


async def authorize(
    request: Request, authorization: Annotated[str | None, Header()] = None
) -> None:
    """With DRES_API_TOKEN set, a read wants that token or an approver's; a write that token."""
    settings: Settings = request.app.state.settings
    token = settings.api_token
    if not token:
        return
    given = bearer(authorization)
    if given and _same(given, token):
        return
    if given and settings.approver_named(given) is not None:
        if request.method in READS:
            return
        raise HTTPException(
            403,
            "an approver's token reads and decides approvals only: this write wants the API token",
        )
    raise _unauthorized()


async def decider(
    request: Request, authorization: Annotated[str | None, Header()] = None
) -> str | None:
    """Who decides an approval: with DRES_APPROVER_TOKENS set, the NAME of the approver whose
    token the request carries (no other token decides: the API token gets 403); else None, and
    the API token, when one is set, decides as on every write."""
    settings: Settings = request.app.state.settings
    if not settings.approvers:
        await authorize(request, authorization)
        return None
    given = bearer(authorization)
    name = settings.approver_named(given) if given else None
    if name is not None:
        return name
    if given and settings.api_token and _same(given, settings.api_token):
        raise HTTPException(
            403,
            "only an approver's token (DRES_APPROVER_TOKENS) decides approvals: the turn's "
            "caller may not approve its own writes",
        )
    raise _unauthorized()


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
