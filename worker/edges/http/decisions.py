"""``POST /v1/turns/{turn_id}/approvals/{approval_id}``: a person's decision on an approval
request (docs/http-api.md). A router of its own, because its caller is not the turns' caller:
with DRES_APPROVER_TOKENS set only an approver's token decides, and the decision's ``by`` is
that approver's name.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path
from starlette.exceptions import HTTPException

from ledger.ids import ID
from worker.edges.http.deps import RT, TurnId, decider
from worker.edges.http.schemas import (
    ERRORS,
    TURN_ERRORS,
    WRITE_ERRORS,
    DecisionOut,
    DecisionRequest,
)
from worker.lifecycle.approvals import DecidedKind

#: a decision's outcome as its answer's status (docs/http-api.md): a refusal is a conflict with the
#: request's state, an unknown request of a waiting turn is not found
DECIDED_STATUS: dict[DecidedKind, int] = {
    DecidedKind.DECIDED: 202,
    DecidedKind.INVALID: 422,
    DecidedKind.UNKNOWN: 404,
    DecidedKind.ALREADY: 409,
    DecidedKind.NOT_WAITING: 409,
    DecidedKind.WRONG_SIGNATURE: 409,
    DecidedKind.CONTENDED: 409,
}

router = APIRouter(prefix="/v1/turns", responses={**ERRORS, **TURN_ERRORS})


@router.post(
    "/{turn_id}/approvals/{approval_id}",
    status_code=202,
    response_model=DecisionOut,
    responses=WRITE_ERRORS,
)
def decide(
    rt: RT,
    turn_id: TurnId,
    approval_id: Annotated[str, Path(pattern=ID, description="the request's id")],
    body: DecisionRequest,
    approver: Annotated[str | None, Depends(decider)],
) -> DecisionOut:
    """A person's decision on an approval request (docs/semantics.md): taken once, for the
    requested signature only; 409 when it was decided already (the detail says how), when the
    signature is another call's, or when the turn does not wait on it. With approvers set,
    ``by`` is the approver's name: a body that names another is a 422."""
    if approver is not None and body.by not in (None, approver):
        raise HTTPException(
            422, f"by: this token is the approver {approver!r}'s: by must be that name or left out"
        )
    decided = rt.lifecycle.decide(
        turn_id,
        approval_id,
        body.decision,
        body.signature,
        reason=body.reason,
        by=approver or body.by or "api",
    )
    if not decided.ok:
        raise HTTPException(DECIDED_STATUS[decided.kind], decided.detail)
    return DecisionOut(
        turn_id=turn_id,
        approval_id=approval_id,
        decision=body.decision,
        detail=decided.detail,
        run_id=decided.run_id,
    )
