"""Tenants at the HTTP edge (docs/http-api.md, "Tenants"): which tenant a request's new turn
belongs to, and ``GET /v1/tenants/{tenant}``.

A new turn's tenant is the ``tenant`` of ``POST /v1/turns``' body or the ``Dres-Tenant`` header,
which every route that starts a turn takes (``POST /v1/turns``, the fork, the chat protocols);
neither: ``default`` (a fork: its source turn's). Both: the header's. A gateway that sets the
header from who is calling is then never overruled by a body its caller wrote; and not a 422:
the OpenAPI document cannot say that two valid values must agree, so a client (or a fuzzer)
that keeps to it must not be refused. The limits themselves, and what a turn does while its
tenant has no room, are the lifecycle's; a tenant whose queue is full answers 429
(``app.queue_full``).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Header, Path

from ledger.ids import TENANT
from worker.edges.http.deps import RT, authorize
from worker.edges.http.schemas import ERRORS, TenantView

#: the header that names a new turn's tenant, on every route that starts one
TENANT_HEADER = "Dres-Tenant"

#: the ``Dres-Tenant`` header of a route that starts a turn
TenantHeader = Annotated[
    str | None,
    Header(
        alias=TENANT_HEADER,
        pattern=TENANT,
        description="the tenant of the turn this request starts (absent: `default`; a fork: "
        "its source turn's); it wins over a body's `tenant`",
    ),
]


def tenant_of(body: str | None, header: str | None) -> str | None:
    """The tenant a request names: its ``Dres-Tenant`` header's, else its body's (None:
    neither)."""
    return header if header is not None else body


router = APIRouter(prefix="/v1/tenants", dependencies=[Depends(authorize)], responses=ERRORS)


@router.get("/{tenant}", response_model=TenantView)
def tenant(
    rt: RT,
    tenant: Annotated[str, Path(pattern=TENANT, description="the tenant's id")],
) -> TenantView:
    """The tenant's turns running (or resuming) and queued now, and the limits it runs under;
    any valid tenant is known (one with no turns has zero of each)."""
    return TenantView.model_validate(rt.lifecycle.tenant_view(tenant))
