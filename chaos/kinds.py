"""Which faults a chaos run draws from, given the kinds asked for (``--only``) and the pool:
the default faults, or one of the kinds asked for alone (``failover``, ``approval``,
``conversation``, ``timer``), each on a set-up or a runner of its own."""

from __future__ import annotations

from collections.abc import Collection

from chaos.approvals import APPROVAL_FAULTS
from chaos.cluster import GEVENT
from chaos.conversations import CONVERSATION_FAULTS
from chaos.timers import TIMER_FAULTS
from chaos.trial import (
    APPROVAL,
    CONVERSATION,
    FAILOVER,
    FAILOVER_FAULTS,
    FAULTS,
    NOT_UNDER_GEVENT,
    TIMER,
)

#: the kinds asked for alone, never drawn otherwise, and why each needs its own trials
ALONE = {
    APPROVAL: (APPROVAL_FAULTS, "run on a worker where writes wait for a person"),
    FAILOVER: (FAILOVER_FAULTS, "run on a Sentinel set-up of their own"),
    CONVERSATION: (CONVERSATION_FAULTS, "send a second message mid-turn, the runner's own"),
    TIMER: (TIMER_FAULTS, "wait on a timer, on two workers"),
}


def drawn(only: Collection[str], pool: str = "prefork") -> list[tuple[str, str]]:
    """The faults a run draws from, given ``only`` (the actions wanted; all when empty) and the
    workers' ``pool`` (a gevent run draws none of ``NOT_UNDER_GEVENT``, and neither failover nor
    approval trials; conversation and timer trials it does)."""
    if pool == GEVENT:
        if APPROVAL in only or FAILOVER in only:
            raise ValueError("gevent runs draw the default faults (store faults included)")
        faults = [f for f in drawn(only) if f[0] not in NOT_UNDER_GEVENT]
        if not faults:
            raise ValueError(f"{sorted(only)}: not drawn under gevent ({NOT_UNDER_GEVENT})")
        return faults
    for kind, (faults, why) in ALONE.items():
        if kind in only:
            if set(only) != {kind}:
                raise ValueError(f"{kind} trials {why}: ask for them alone")
            return faults
    faults = [fault for fault in FAULTS if not only or fault[0] in only]
    if not faults:
        raise ValueError(f"no fault has one of the actions {sorted(only)}")
    return faults
