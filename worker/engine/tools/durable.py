"""Confirming a write's records as ``DRES_DURABILITY`` asks (docs/faults.md), for the executor.

Before a write's effect runs its ``tool_start`` is confirmed: one attempt (a ``WAIT``/``WAITAOF``
of ``DRES_DURABILITY_TIMEOUT_S``). One that falls short closes the call unrun, with an error
result (neither completed nor interrupted: the model may make the call again), and the run ends
as a transport error does. After the effect its ``tool_done`` is confirmed before the turn goes
on; the effect has run, so a short answer is asked again within the store-outage window (a
replica catching up), and only then, or at once when the record is gone from the stream, the run
ends the same way: its resume meets layer 2, or the interrupted-write guard if the record was
lost. Both end by raising ``Unconfirmed``, which the loop takes for a transport error.
"""

from __future__ import annotations

import time

import structlog

from ledger.errors import StoreFull
from ledger.events import ToolDone
from worker.base.errors import Unconfirmed
from worker.engine.recorder import Recorder
from worker.engine.tools.calls import error_result

log = structlog.get_logger("dres.executor")

#: the result of a write whose ``tool_start`` could not be confirmed: its effect did not run
NOT_RUN = "not run: the store could not confirm the record"
#: seconds between confirmations of a ``tool_done`` that the server refused outright (one that
#: falls short has already waited its timeout)
REFUSED_WAIT_S = 0.1


def confirm_start(recorder: Recorder, call_id: str, tool: str) -> None:
    """The write's ``tool_start`` (the run's newest record) is confirmed, or the call is closed
    unrun and ``Unconfirmed`` raised: its effect never runs unconfirmed."""

    def not_run() -> ToolDone:
        result = error_result(NOT_RUN)
        return recorder.make(ToolDone, call_id=call_id, tool=tool, result=result, is_error=True)

    try:
        confirmation = recorder.confirm()
    except StoreFull as e:
        # the store_full stop records the call's closing with its own end
        raise StoreFull(e.what, [*e.unrecorded, not_run()]) from e
    if confirmation.ok:
        return
    log.warning(
        "tool_start not confirmed; the call is not run",
        tool=tool,
        call_id=call_id,
        found=str(confirmation),
    )
    recorder.record_many([not_run()])
    raise Unconfirmed(f"{tool} call {call_id} not run: tool_start {confirmation}")


def confirm_done(recorder: Recorder, call_id: str, tool: str) -> None:
    """The write's ``tool_done`` (the run's newest record) is confirmed, asked again within the
    store-outage window while it falls short; else ``Unconfirmed``."""
    deadline = time.monotonic() + recorder.ledger.outage_s
    while True:
        confirmation = recorder.confirm()
        if confirmation.ok:
            return
        left = deadline - time.monotonic()
        if not confirmation.present or left <= 0:
            break
        log.info("tool_done not confirmed yet", tool=tool, found=str(confirmation))
        if confirmation.error:
            time.sleep(min(REFUSED_WAIT_S, left))
    log.warning(
        "tool_done not confirmed; the run ends as a transport error",
        tool=tool,
        call_id=call_id,
        found=str(confirmation),
    )
    raise Unconfirmed(f"{tool} call {call_id}: tool_done {confirmation}")
