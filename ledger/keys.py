"""Every Redis key name dres uses, in one place.

All keys of one turn share the hash tag ``{turn_id}`` so that a turn's stream, metadata and
dedupe index live in one Redis Cluster slot and the Lua scripts may touch them together.
"""

from __future__ import annotations

from ledger.errors import InvalidId

PREFIX = "dres"


def _tag(value: str) -> str:
    if not value or "{" in value or "}" in value:
        raise InvalidId(f"id {value!r} must be non-empty and may not contain braces")
    return "{" + value + "}"


def turn_events(turn_id: str) -> str:
    """The turn's event stream."""
    return f"{PREFIX}:turn:{_tag(turn_id)}:events"


def turn_meta(turn_id: str) -> str:
    """Hash: status, lease epoch, runs, chunk, pending run, continuation count."""
    return f"{PREFIX}:turn:{_tag(turn_id)}:meta"


def turn_keys(turn_id: str) -> tuple[str, str]:
    """The keys every turn script receives, in the order the scripts expect."""
    return turn_events(turn_id), turn_meta(turn_id)


def turn_durable(turn_id: str) -> str:
    """String, short-lived: the write a durability confirmation makes on its own connection so
    that its ``WAIT``/``WAITAOF`` covers the turn's record (``ledger.durability``)."""
    return f"{PREFIX}:turn:{_tag(turn_id)}:durable"


def chunk_message(turn_id: str, run_id: str) -> str:
    """String in the **broker's** Redis, there exactly while a chunk message of that run is in
    the broker (queued, or held unacknowledged by a worker): dres's kombu transport writes it in
    the transaction that queues the message and deletes it in the one that acknowledges it
    (``worker.edges.celery.marks``), so the reaper asks "is this due run's message still there?"
    with one ``EXISTS`` instead of reading the queues."""
    return f"{PREFIX}:turn:{_tag(turn_id)}:message:{run_id}"


def conversation_turns(conversation_id: str) -> str:
    """List of the conversation's turn ids, oldest first."""
    return f"{PREFIX}:conv:{_tag(conversation_id)}:turns"


def conversation_meta(conversation_id: str) -> str:
    """Hash beside the conversation's list: its ``title`` (the first message, cut), kept when
    the first turn's own keys expire."""
    return f"{PREFIX}:conv:{_tag(conversation_id)}:meta"


def conversation_line(conversation_id: str) -> str:
    """String: the turn that holds the conversation's line (docs/semantics.md, one live turn per
    conversation): the one turn of it that may run, resume or wait now. Set by compare-and-set
    (``lua/line.lua``) when a turn is let through, cleared once its holder has ended."""
    return f"{PREFIX}:conv:{_tag(conversation_id)}:line"


def conversation_erased(conversation_id: str) -> str:
    """Flag, for as long as a finished turn's keys live: the conversation was erased on request,
    so its id does not quietly start a new conversation for a client that still holds it."""
    return f"{PREFIX}:conv:{_tag(conversation_id)}:erased"


def conversations() -> str:
    """Sorted set of conversation ids, scored by when each was last updated (ms: its newest
    message or Continue). Global on purpose (a person lists conversations across all of them),
    like ``active_turns``: written beside the turn scripts with single-key commands, once per
    message or Continue (never per event), and pruned by its readers of the conversations whose
    newest turn's keys expired."""
    return f"{PREFIX}:conversations"


def turn_cancel(turn_id: str) -> str:
    """Flag: Stop was requested; the running run ends at its next safe point."""
    return f"{PREFIX}:turn:{_tag(turn_id)}:cancel"


def timer_hints() -> str:
    """Sorted set of turns waiting on a timer, scored by their ``wake_at`` (ms): a hint of when
    the next falls due, so every worker's reaper sweeps then (``TurnStore.next_timer``); the
    reaper's index (``active_turns``) holds the truth, and a hint whose time passed is dropped."""
    return "dres:timers"


def active_turns() -> str:
    """Sorted set of unfinished turn ids, scored by when the reaper should look at them (ms).

    Global on purpose (the reaper scans it). On one server the claim's script writes it too (one
    round trip for the claim and its look); on a Redis Cluster it is written beside the turn
    scripts, never inside them, so it does not break the one-slot rule of a turn's keys. It stays
    one key, on one master, touched only by single-key commands: the reaper takes the most
    overdue turns in one ZRANGEBYSCORE, and it is written a few times per chunk (create, claim,
    hand-over, end), never per event, which one master carries far beyond what the one broker
    dispatches. Sharded per slot, every sweep would ask every master and merge.
    """
    return f"{PREFIX}:active"


def approvals_pending() -> str:
    """Sorted set of approval requests not yet decided, across turns: members
    ``turn_id/approval_id``, scored by when they were requested (ms). Global on purpose (a person
    lists them across turns), like ``active_turns``: written beside the turn scripts with
    single-key commands, before the step that makes a request open (a crash in between leaves an
    entry whose request is not open, which a reader drops)."""
    return f"{PREFIX}:approvals:pending"


def approval_requests() -> str:
    """Hash: ``turn_id/approval_id`` -> the open request's JSON (``approval_requested``), so a
    listing reads a page of requests in one command. Written and cleared with
    ``approvals_pending``."""
    return f"{PREFIX}:approvals:requests"


def workers() -> str:
    """Sorted set of the workers alive lately: each running ``dres worker`` (its main process)
    scored by when it last said so (ms), every few seconds (``ledger.presence``). Global on purpose
    (``GET /healthz`` counts them), like ``active_turns``: one single-key command per worker per
    beat, trimmed of the ones not seen for a while at each beat, so it holds about one member per
    live worker."""
    return f"{PREFIX}:workers"


#: the hash tag of tenant admission's keys: one slot, so that one script sees every tenant's queue
TENANTS = "{tenants}"


def tenants_ring() -> str:
    """Sorted set of the tenants with turns waiting to start, in round-robin order (a tenant let
    through goes to the back): ``ledger.tenants``. Global on purpose, like ``active_turns``, and
    in one slot with every tenant's keys (``TENANTS``), so that admission is one script: written
    a few times per turn (its admission, its end), never per event."""
    return f"{PREFIX}:{TENANTS}:ring"


def tenants_order() -> str:
    """Counter: the ring's order (each tenant let through is scored with the next number)."""
    return f"{PREFIX}:{TENANTS}:order"


def tenants_holding() -> str:
    """Set of the tenants whose turns hold slots now: what the reaper's mend looks through for a
    slot a crash left behind. Its name is the order's with ``holding`` (``lua/tenants.lua``)."""
    return f"{PREFIX}:{TENANTS}:holding"


def tenant_owners() -> str:
    """Hash: turn id -> its tenant, for each turn that holds a slot or waits to start, so a turn's
    end gives its slot back by its id alone."""
    return f"{PREFIX}:{TENANTS}:owners"


def tenant_prefix() -> str:
    """The prefix of one tenant's keys, which ``lua/tenants.lua`` completes: ``<tenant>:queued``
    (its new turns waiting, scored by when they came, ms), ``<tenant>:resume`` (its turns resuming
    after a wait), ``<tenant>:running`` (the turns holding its slots, scored by when each took its
    slot, ms) and ``<tenant>:tat`` (when its next start may be, ms: its rate)."""
    return f"{PREFIX}:{TENANTS}:tenant:"


def tenant_key(tenant: str, part: str) -> str:
    """One of ``tenant``'s keys (``tenant_prefix``); a tenant id has no braces (ledger.ids)."""
    if not tenant or "{" in tenant or "}" in tenant:
        raise InvalidId(f"tenant {tenant!r} must be non-empty and may not contain braces")
    return f"{tenant_prefix()}{tenant}:{part}"


#: the hash tag of the schedules' keys: one slot, so that one script moves a schedule and its index
SCHEDULES = "{schedules}"


def schedules_due() -> str:
    """Sorted set of schedule ids, scored by their next tick (ms): what the reapers' look at due
    schedules reads (``ledger.schedules``). Global on purpose, like ``active_turns``, in one slot
    with every schedule's hash (``SCHEDULES``): written once per tick, never per event. A spent
    schedule (an ``at`` that fired) is not in it."""
    return f"{PREFIX}:{SCHEDULES}:due"


def schedules_listed() -> str:
    """Sorted set of every schedule's id, scored by when it was made (ms): the listing."""
    return f"{PREFIX}:{SCHEDULES}:listed"


def schedule(schedule_id: str) -> str:
    """Hash: one schedule (its message, ``at`` or ``every``, next tick, last turn, the claim of
    the tick being fired); a schedule id has no braces (ledger.ids)."""
    if not schedule_id or "{" in schedule_id or "}" in schedule_id:
        raise InvalidId(f"schedule {schedule_id!r} must be non-empty and may not contain braces")
    return f"{PREFIX}:{SCHEDULES}:schedule:{schedule_id}"


def idempotency(key: str) -> str:
    """An API Idempotency-Key: the request's hash and the turn it created."""
    return f"{PREFIX}:idem:{_tag(key)}"


def chaos_fault() -> str:
    """Hash: the one fault the chaos runner armed (point, action, skip, hits, fired)."""
    return f"{PREFIX}:chaos:fault"
