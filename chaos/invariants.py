"""What must hold after every chaos trial, checked from the ledger and the tools' effects.

Pure functions: events, effect rows and plain values in, violations (sentences) out. They fall in
two groups, because ``--naive`` runs the same trials with the journal's protections switched off
and is expected to fail exactly one of them:
- ``duplicate_checks``: a write's side effect happened once (what the journal note, the hard-block
  and the interrupted-write guard exist for);
- ``other_checks``: everything else (the stream is well formed, the turn ended within the bound,
  its metadata agrees with its stream, no record was lost), which naive resume must pass too.
``approval_checks`` (the ``approval`` trials, docs/semantics.md) go with the first group: no write
that needs approval ran without an ``approve`` for its signature, and none ran twice on one.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from ledger.codec import Envelope
from ledger.events import (
    ApprovalDecided,
    ApprovalRequested,
    RunEnded,
    RunStarted,
    ToolDone,
    ToolStart,
    TurnEnded,
)

#: writes that are not idempotent: an interrupted one may never run again (``chaos_wait``, the
#: timer trials', then waits)
PLAIN_WRITES = frozenset({"chaos_send", "chaos_note", "chaos_wait"})
IDEMPOTENT_WRITES = frozenset({"chaos_charge"})
#: every write of the chaos tools: an ``approval`` trial's worker has each wait for a person
WRITES = PLAIN_WRITES | IDEMPOTENT_WRITES
#: the statuses a turn ends in; every end short of completion is ``stopped`` with a code
ENDED = frozenset({"completed", "stopped"})


def check(
    envelopes: Sequence[Envelope],
    effects: Sequence[dict[str, Any]],
    *,
    status: str,
    code: str,
    soft_limit_in_tool: bool,
) -> list[str]:
    """Every invariant of one turn; ``status`` and ``code`` are the turn's metadata at the end."""
    return [
        *duplicate_checks(envelopes, effects),
        *other_checks(
            envelopes, effects, status=status, code=code, soft_limit_in_tool=soft_limit_in_tool
        ),
    ]


def duplicate_checks(envelopes: Sequence[Envelope], effects: Sequence[dict[str, Any]]) -> list[str]:
    events = [env.event for env in envelopes]
    return [*completed_writes_ran_once(effects), *interrupted_writes_not_retried(events)]


def other_checks(
    envelopes: Sequence[Envelope],
    effects: Sequence[dict[str, Any]],
    *,
    status: str,
    code: str,
    soft_limit_in_tool: bool,
    newest: bool = True,
) -> list[str]:
    """``newest``: the turn is its conversation's newest (a conversation trial's earlier turn
    is not: it may end stopped without Continue)."""
    events = [env.event for env in envelopes]
    end = last_turn_ended(events)
    return [
        *terminal(status, end.can_continue if end else False, code, newest=newest),
        *meta_matches_stream(events, status, code),
        *nothing_after_turn_ended(envelopes),
        *runs_closed(envelopes, ended=status in ENDED),
        *each_run_started_once(events),
        *no_fenced_out_events(envelopes),
        *no_lost_records(events, effects, soft_limit_in_tool),
    ]


def last_turn_ended(events: Sequence[Any]) -> TurnEnded | None:
    """The stream's last ``turn_ended`` (a continued turn has earlier ones), or None."""
    return next((e for e in reversed(events) if isinstance(e, TurnEnded)), None)


# -- duplicate effects --------------------------------------------------------------------------


def duplicate_effects(effects: Sequence[dict[str, Any]]) -> int:
    """Extra executions of plain writes plus extra applications of the idempotent charge."""
    return sum(n - 1 for n in _plain_runs(effects).values()) + sum(
        n - 1 for n in _charges_applied(effects).values()
    )


def _plain_runs(effects: Sequence[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    return Counter(
        (row["tool"], row.get("to"), row.get("subject"), row.get("text"))
        for row in effects
        if row["tool"] in PLAIN_WRITES
    )


def _charges_applied(effects: Sequence[dict[str, Any]]) -> Counter[Any]:
    return Counter(
        row["amount"] for row in effects if row["tool"] in IDEMPOTENT_WRITES and row["applied"]
    )


def completed_writes_ran_once(effects: Sequence[dict[str, Any]]) -> list[str]:
    """A plain write's effect happened at most once; an idempotent one was applied at most once."""
    out = [f"{key[0]} ran {n} times: {key[1:]}" for key, n in _plain_runs(effects).items() if n > 1]
    out += [
        f"chaos_charge of {amount} applied {n} times"
        for amount, n in _charges_applied(effects).items()
        if n > 1
    ]
    return out


def interrupted_writes_not_retried(events: Sequence[Any]) -> list[str]:
    """A plain write's input is started at most once: a retry of an interrupted one is refused."""
    starts = Counter(
        (e.tool, e.signature) for e in events if isinstance(e, ToolStart) and e.tool in PLAIN_WRITES
    )
    return [f"{tool} started {n} times with one input" for (tool, _), n in starts.items() if n > 1]


# -- approvals (docs/semantics.md) -----------------------------------------------------------------


def approval_checks(
    events: Sequence[Any],
    effects: Sequence[dict[str, Any]],
    needs: Collection[str] = WRITES,
    idempotent: Collection[str] = IDEMPOTENT_WRITES,
) -> list[str]:
    """No write of a tool in ``needs`` (the ones that wait for a person) ran without an
    ``approve`` for its signature, and none took effect twice on one approval; a denied call ran
    nothing.

    An effect row is one execution (``chaos.tools``), traced to its ``tool_start`` by its
    ``call_id``: that ``tool_start`` names an approval, whose request is for the same call and
    signature and whose ``approval_decided`` (earlier in the stream) is ``approve``. The one
    execution without an approval of its own is an idempotent tool's retry of an interrupted
    approved call (docs/semantics.md: a repeat after a resume meets the interrupted-write guard,
    never a new request; docs/semantics.md: an idempotent write is retried): it runs on the approval
    of the latest earlier start of the same tool and signature. An approval is named by one
    ``tool_start`` and takes effect once at most: one row of a plain write, one application of an
    idempotent one's key (its retries log a row per attempt, ``applied`` on the first only).
    """
    requests: dict[str, ApprovalRequested] = {}
    decided: dict[str, str] = {}  # approval_id -> its decision, as far as the stream has come
    #: call_id -> its tool_start, the approval it runs on, and that approval's decision when it
    #: started (a later decision authorises nothing)
    starts: dict[str, tuple[ToolStart, str | None, str | None]] = {}
    #: (tool, signature) -> the approval of its latest start that named one
    approved: dict[tuple[str, str], str] = {}
    named: Counter[str] = Counter()
    for event in events:
        if isinstance(event, ApprovalRequested):
            requests[event.approval_id] = event
        elif isinstance(event, ApprovalDecided):
            decided.setdefault(event.approval_id, event.decision)
        elif isinstance(event, ToolStart) and event.tool in needs:
            aid = event.approval_id
            if aid:
                named[aid] += 1
                approved[(event.tool, event.signature)] = aid
            elif event.tool in idempotent:
                aid = approved.get((event.tool, event.signature))  # a retry, or None
            starts.setdefault(event.call_id or "", (event, aid, decided.get(aid or "")))
    out = [f"approval {aid} named by {n} tool_starts" for aid, n in named.items() if n > 1]
    took: Counter[str] = Counter()
    for row in effects:
        if row["tool"] not in needs or row["call_id"] not in starts:
            continue  # one with no tool_start at all is ``no_lost_records``'s to report
        start, aid, decision = starts[row["call_id"]]
        what = f"{row['tool']} call {row['call_id']}"
        out += _approved(what, start, aid, decision, requests.get(aid or ""))
        if aid and row.get("applied", True):
            took[aid] += 1
    out += [f"approval {aid} took effect {n} times" for aid, n in took.items() if n > 1]
    denied = {r.call_id for aid, r in requests.items() if decided.get(aid) == "deny"}
    out += [
        f"{row['tool']} call {row['call_id']} ran though its approval was denied"
        for row in effects
        if row["call_id"] in denied
    ]
    return out


def _approved(
    what: str,
    start: ToolStart,
    aid: str | None,
    decision: str | None,
    request: ApprovalRequested | None,
) -> list[str]:
    if not aid:
        return [f"{what} ran without an approval"]
    if request is None:
        return [f"{what} ran on approval {aid}, which was never requested"]
    if request.signature != start.signature or (
        start.approval_id and request.call_id != start.call_id
    ):
        return [f"{what} ran on approval {aid}, requested for another call"]
    if decision != "approve":
        return [f"{what} ran on approval {aid}, decided {decision or 'not yet'}"]
    return []


# -- the turn's end -----------------------------------------------------------------------------


def terminal(status: str, can_continue: bool, code: str = "", *, newest: bool = True) -> list[str]:
    """The turn completed, or stopped with Continue available (each trial's turn is its
    conversation's newest, and every newest stop may be continued). A turn that is no longer its
    conversation's newest (``newest`` False) may have stopped without Continue: only the newest
    stop may be continued, and a superseded turn never (``chaos.conversation_checks`` says when
    one may be superseded)."""
    if status == "completed" or (status == "stopped" and (can_continue or not newest)):
        return []
    if status == "stopped":
        return [f"the turn stopped ({code or 'no code'}) without can_continue"]
    return [f"the turn was still {status!r} at the bound"]


def meta_matches_stream(events: Sequence[Any], status: str, code: str) -> list[str]:
    """The metadata's status is the last ``turn_ended``'s, and a stop's code is the event's.

    A turn whose metadata is not ended yet may follow a stopped ``turn_ended`` (a Continue in
    flight); that it did not end in time is ``terminal``'s to say. A completed turn never goes on.
    """
    end = last_turn_ended(events)
    if end is None:
        if status in ENDED:
            return [f"the metadata says {status!r} but the stream has no turn_ended"]
        return []
    if status not in ENDED:
        if end.status == "completed":
            return [f"the metadata says {status!r} after the turn completed"]
        return []
    if status != end.status:
        return [f"the metadata says {status!r}, the last turn_ended {end.status!r}"]
    if status == "stopped" and code != end.code:
        return [f"the metadata's stop code is {code!r}, the last turn_ended's {end.code!r}"]
    return []


def completed_despite_backlog(status: str, code: str) -> list[str]:
    """A backlog delays a turn; it never stops it (docs/semantics.md, 'Queued is not lost')."""
    if status == "completed":
        return []
    return [f"a backlog left the turn {status!r}" + (f" ({code})" if code else "")]


def worker_stayed(exits: int) -> list[str]:
    """A store fault never takes a worker down (docs/faults.md): it rides the outage out in the
    same process (``exits``: times the worker process ended during the trial)."""
    if not exits:
        return []
    return [f"the worker exited {exits} time(s) during a store fault"]


def one_message_per_run(copies: Mapping[str, int]) -> list[str]:
    """The broker never held two messages for one run (``copies``: the most seen at once)."""
    return [f"the broker held {n} messages for {task}" for task, n in copies.items() if n > 1]


# -- the stream is well formed (docs/events.md) ----------------------------------------------------


def nothing_after_turn_ended(envelopes: Sequence[Envelope]) -> list[str]:
    """The stream's last ``turn_ended`` is its final entry (earlier ones were continued)."""
    ends = [i for i, env in enumerate(envelopes) if isinstance(env.event, TurnEnded)]
    if not ends:
        return []
    last = envelopes[ends[-1]]
    return [
        f"{env.stream_id} {env.event.type} follows the last turn_ended ({last.stream_id})"
        for env in envelopes[ends[-1] + 1 :]
    ]


def runs_closed(envelopes: Sequence[Envelope], *, ended: bool = True) -> list[str]:
    """Every ``run_started`` is followed by a ``run_ended`` of the same run_id (its own, or the
    ``crashed`` one a takeover writes for it). Only in a turn that has not ended yet
    (``ended``: its metadata says so) may the newest run still be open: it is running."""
    open_runs: dict[str, str] = {}  # run_id -> stream id of its run_started
    for env in envelopes:
        event = env.event
        if isinstance(event, RunStarted):
            open_runs[event.run_id] = env.stream_id
        elif isinstance(event, RunEnded):
            open_runs.pop(event.run_id, None)
    running = None if ended else _newest_run_started(envelopes)
    return [
        f"run {run_id} (started at {sid}) has no run_ended after it"
        for run_id, sid in open_runs.items()
        if run_id != running
    ]


def _newest_run_started(envelopes: Sequence[Envelope]) -> str | None:
    return next(
        (env.event.run_id for env in reversed(envelopes) if isinstance(env.event, RunStarted)),
        None,
    )


def each_run_started_once(events: Sequence[Any]) -> list[str]:
    """A run id is one attempt: a second ``run_started`` of it means a message claimed twice."""
    starts = Counter(e.run_id for e in events if isinstance(e, RunStarted))
    return [f"run {run_id} started {n} times" for run_id, n in starts.items() if n > 1]


def no_fenced_out_events(envelopes: Sequence[Envelope]) -> list[str]:
    """Every event of lease epoch E was written by the run that took E (its first event's run)."""
    holders: dict[int, str] = {}
    out = []
    for env in envelopes:
        epoch = int(env.stream_id.split("-")[0])
        holder = holders.setdefault(epoch, env.event.run_id)
        if env.event.run_id != holder:
            out.append(
                f"{env.stream_id} {env.event.type} by {env.event.run_id}, epoch held by {holder}"
            )
    return out


def no_lost_records(
    events: Sequence[Any], effects: Sequence[dict[str, Any]], soft_limit_in_tool: bool
) -> list[str]:
    """An effect the tools logged has its tool_start; under a soft limit, its tool_done too."""
    started = {e.call_id for e in events if isinstance(e, ToolStart)}
    done: dict[str, list[ToolDone]] = defaultdict(list)
    for e in events:
        if isinstance(e, ToolDone) and e.call_id:
            done[e.call_id].append(e)
    out = [
        f"effect of {r['tool']} call {r['call_id']} has no tool_start"
        for r in effects
        if r["call_id"] not in started
    ]
    if soft_limit_in_tool:
        out += [
            f"soft limit lost the tool_done of {r['tool']} call {r['call_id']}"
            for r in effects
            if not done.get(r["call_id"])
        ]
    return out
