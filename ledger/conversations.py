"""Conversations across turns (docs/http-api.md): list them, read one, erase one on request.

A conversation is its list of turn ids (``keys.conversation_turns``, oldest first), a small hash
with its title (``keys.conversation_meta``) and an entry in one sorted set of all conversations
(``keys.conversations``) scored by when it was last updated: its newest message or Continue.
Those writes are single-key commands beside the turn scripts (O(log n) each), so every key stays
in one Redis Cluster slot. A conversation's newest status is read live from its newest turn's
metadata, never copied: the status has one writer, the turn's state machine.

A conversation lives as long as its newest turn's keys: readers that find that turn gone forget
the conversation (``lua/forget.lua``, ``lua/unlist.lua``), each step conditioned on nothing
having joined it meanwhile, so a message that races the forgetting keeps its conversation.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ledger import keys
from ledger.approval_index import ApprovalIndex
from ledger.codec import decode_one, text
from ledger.errors import CorruptTurn
from ledger.events import TurnStarted
from ledger.paging import Cursor, Row, read_page
from ledger.store import Ledger, script
from ledger.turn import TurnMeta, TurnStatus

#: characters of the first message a conversation's title keeps
TITLE_CHARS = 80
#: the statuses a conversation may be erased in: every turn of it has ended
ERASABLE = (TurnStatus.COMPLETED, TurnStatus.STOPPED)


def title_of(message: str) -> str:
    """A conversation's title: its first message, whitespace collapsed, cut to TITLE_CHARS."""
    flat = " ".join(message.split())
    return flat if len(flat) <= TITLE_CHARS else flat[: TITLE_CHARS - 1] + "…"


@dataclass(frozen=True, slots=True)
class Listed:
    """A conversation as the listing shows it."""

    conversation_id: str
    title: str
    #: seconds since the epoch: its newest message or Continue
    updated_at: float
    newest: TurnMeta


@dataclass(frozen=True, slots=True)
class Conversation:
    conversation_id: str
    title: str
    #: its turns whose keys live, oldest first, each with its message
    turns: tuple[tuple[TurnMeta, str], ...]

    @property
    def newest_turn(self) -> str | None:
        return self.turns[-1][0].turn_id if self.turns else None


@dataclass(frozen=True, slots=True)
class Erased:
    """What an erase did: ``ok``, or the turn (and its status) that refused it."""

    ok: bool
    #: turns whose keys were deleted
    turns: int = 0
    blocking: str = ""
    status: str = TurnStatus.QUEUED.value
    #: False: no such conversation (no turns listed, not in the listing)
    known: bool = True


class Conversations:
    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.client = ledger.client
        self._forget = self.client.register_script(script("forget.lua"))
        self._unlist = self.client.register_script(script("unlist.lua"))
        self._erase = self.client.register_script(script("erase.lua"))
        self._approvals = ApprovalIndex(ledger)

    # -- writes beside the turn scripts ------------------------------------------------------

    def join(self, turn_id: str, conversation_id: str) -> None:
        """Add the turn to its conversation's list once (idempotent), then to the listing (its
        title and time from its ``turn_started``)."""
        conv = keys.conversation_turns(conversation_id)
        if self.client.lpos(conv, turn_id) is None:
            self.client.rpush(conv, turn_id)
        first: Any = self.client.xrange(keys.turn_events(turn_id), min="0-1", max="0-1")
        started = _started(first)
        if started is not None:
            self.record(conversation_id, int(started.ts * 1000), started.message)

    def leave(self, turn_id: str, conversation_id: str) -> None:
        """Take a withdrawn turn off its conversation's list; a conversation it was the only
        turn of leaves the listing too."""
        conv = keys.conversation_turns(conversation_id)
        self.client.lrem(conv, 0, turn_id)
        if not self.client.llen(conv):
            score = self.client.zscore(keys.conversations(), conversation_id)
            self.forget(conversation_id, "", _ms(score))

    def record(self, conversation_id: str, at_ms: int, message: str) -> None:
        """A turn joined the conversation (after it was added to the list): its title, if it
        has none yet, and its place in the listing. Idempotent."""

        def write() -> Any:
            pipe = self.client.pipeline(transaction=False)
            pipe.hsetnx(keys.conversation_meta(conversation_id), "title", title_of(message))
            pipe.zadd(keys.conversations(), {conversation_id: at_ms})
            return pipe.execute()

        self.ledger.retry(write)

    def touch(self, conversation_id: str, at_ms: int) -> None:
        """The conversation was updated (a Continue): it moves to the top of the listing."""
        if not conversation_id:
            return
        self.ledger.retry(
            lambda: self.client.zadd(keys.conversations(), {conversation_id: at_ms}, xx=True)
        )

    def set_base(self, conversation_id: str, turn_ids: Sequence[str]) -> None:
        """A conversation a fork started (``"new"``): the source's turns before the fork, whose
        messages and answers its turns see first (docs/semantics.md, forks)."""
        meta = keys.conversation_meta(conversation_id)
        self.ledger.retry(lambda: self.client.hset(meta, "base", json.dumps(list(turn_ids))))

    # -- reads -------------------------------------------------------------------------------

    def history(self, conversation_id: str, before: str | None = None) -> list[str]:
        """The turn ids a turn of the conversation may see as earlier turns, oldest first: the
        base a fork gave the conversation, then its list up to ``before`` (not included; None:
        the whole list). Replaced turns are among them: the reader leaves them out."""

        def read() -> Any:
            pipe = self.client.pipeline(transaction=False)
            pipe.hget(keys.conversation_meta(conversation_id), "base")
            pipe.lrange(keys.conversation_turns(conversation_id), 0, -1)
            return pipe.execute()

        base, listed = self.ledger.retry(read, "read")
        ids = [text(t) for t in listed]
        if before is not None and before in ids:
            ids = ids[: ids.index(before)]
        return [*_base(base), *ids]

    def newest_turns(self, conversation_id: str, most: int) -> list[str]:
        """The ids of the conversation's newest ``most`` turns, newest first."""
        listed = self.ledger.retry(
            lambda: self.client.lrange(keys.conversation_turns(conversation_id), -most, -1),
            "read",
        )
        return [text(t) for t in reversed(listed)]

    def page(
        self, *, limit: int, cursor: Cursor | str | None = None
    ) -> tuple[list[Listed], Cursor | None]:
        """Conversations, most recently updated first: a page of at most ``limit`` after
        ``cursor`` (``ledger.paging``), and the next page's cursor or None. A conversation whose
        newest turn is gone is forgotten on the way."""
        return read_page(
            self.client, keys.conversations(), self._newest_of, limit=limit, cursor=cursor
        )

    def _newest_of(self, rows: Sequence[Row]) -> list[tuple[str, int, Listed]]:
        """The listed conversations of ``rows`` with their titles and newest turns; those whose
        newest turn is gone are forgotten."""
        pipe = self.client.pipeline(transaction=False)
        for conversation_id, _ in rows:
            pipe.hget(keys.conversation_meta(conversation_id), "title")
            pipe.lindex(keys.conversation_turns(conversation_id), -1)
        heads = pipe.execute()
        newest = [None if head is None else text(head) for head in heads[1::2]]
        pipe = self.client.pipeline(transaction=False)
        for turn_id in newest:
            pipe.hgetall(keys.turn_meta(turn_id or "_"))
        metas = pipe.execute()
        listed: list[tuple[str, int, Listed]] = []
        for i, (conversation_id, score) in enumerate(rows):
            meta = _meta_or_none(newest[i], metas[i])
            if meta is None:
                self.forget(conversation_id, newest[i] or "", score)
                continue
            title = "" if heads[2 * i] is None else text(heads[2 * i])
            listed.append(
                (conversation_id, score, Listed(conversation_id, title, score / 1000, meta))
            )
        return listed

    def get(self, conversation_id: str) -> Conversation | None:
        """The conversation and its turns whose keys live, oldest first; None when it has no
        turns or its newest is gone (then it is forgotten)."""
        conv = keys.conversation_turns(conversation_id)
        listed = [text(t) for t in self.client.lrange(conv, 0, -1)]
        pipe = self.client.pipeline(transaction=False)
        for turn_id in listed:
            pipe.hgetall(keys.turn_meta(turn_id))
            pipe.xrange(keys.turn_events(turn_id), min="0-1", max="0-1")
        pipe.hget(keys.conversation_meta(conversation_id), "title")
        replies = pipe.execute()
        turns: list[tuple[TurnMeta, str]] = []
        for i, turn_id in enumerate(listed):
            meta = _meta_or_none(turn_id, replies[2 * i])
            if meta is not None:
                started = _started(replies[2 * i + 1])
                turns.append((meta, "" if started is None else started.message))
        if not listed or _meta_or_none(listed[-1], replies[2 * (len(listed) - 1)]) is None:
            score = self.client.zscore(keys.conversations(), conversation_id)
            self.forget(conversation_id, listed[-1] if listed else "", _ms(score))
            return None
        title = replies[-1]
        return Conversation(conversation_id, "" if title is None else text(title), tuple(turns))

    # -- forgetting and erasing ----------------------------------------------------------------

    def forget(self, conversation_id: str, newest: str, score: int | None) -> bool:
        """Drop a conversation whose newest turn ``newest`` is gone, unless a turn joined it
        since (its list's newest is another); it leaves the listing unless it was updated since
        it was read there at ``score``. False: it went on."""
        conv = (
            keys.conversation_turns(conversation_id),
            keys.conversation_meta(conversation_id),
            keys.conversation_line(conversation_id),
        )
        if not int(self._forget(keys=conv, args=[newest])):
            return False
        if score is not None:
            self._unlist(keys=[keys.conversations()], args=[conversation_id, score])
        return True

    def erase(self, conversation_id: str) -> Erased:
        """Delete the conversation for good: every turn's keys and index entries, its list and
        its place in the listing. Refused, naming the turn, while a turn of it has not ended
        (queued, running, resuming, waiting). Each turn is erased in one step conditioned on
        its having ended, so a racing Continue is never half-erased."""
        conv = keys.conversation_turns(conversation_id)
        listed = [text(t) for t in self.ledger.retry(lambda: self.client.lrange(conv, 0, -1))]
        pipe = self.client.pipeline(transaction=False)
        for turn_id in listed:
            pipe.hgetall(keys.turn_meta(turn_id))
        metas = [_meta_or_none(t, raw) for t, raw in zip(listed, pipe.execute(), strict=True)]
        for meta in metas:
            if meta is not None and meta.status not in ERASABLE:
                return Erased(False, blocking=meta.turn_id, status=meta.status.value)
        score = self.client.zscore(keys.conversations(), conversation_id)
        if not listed and score is None:
            return Erased(False, known=False)
        erased = 0
        for turn_id, meta in zip(listed, metas, strict=True):
            outcome = text(self._erase(keys=_turn_keys(turn_id), args=[s.value for s in ERASABLE]))
            if outcome not in ("erased", "gone"):
                return Erased(False, erased, blocking=turn_id, status=outcome)
            erased += outcome == "erased"
            self._unindex_turn(turn_id, meta)
        self.client.set(
            keys.conversation_erased(conversation_id), "1", ex=self.ledger.finished_ttl_s
        )
        if not self.forget(conversation_id, listed[-1] if listed else "", _ms(score)):
            # a message joined it meanwhile: its new turn has not ended
            newest = self.client.lindex(conv, -1)
            return Erased(False, erased, blocking="" if newest is None else text(newest))
        return Erased(True, erased)

    def erased(self, conversation_id: str) -> bool:
        """The conversation was erased on request (within a finished turn's keys' lifetime)."""
        return bool(self.client.exists(keys.conversation_erased(conversation_id)))

    def _unindex_turn(self, turn_id: str, meta: TurnMeta | None) -> None:
        """The erased turn's entries in the indexes across turns (the reaper's, approvals')."""
        self.client.zrem(keys.active_turns(), turn_id)
        self._approvals.remove(turn_id, [aid for aid, _, _ in (meta.approvals if meta else ())])


def _base(raw: Any) -> list[str]:
    if raw is None:
        return []
    try:
        ids = json.loads(text(raw))
    except ValueError:
        return []
    return [str(t) for t in ids] if isinstance(ids, list) else []


def _ms(score: Any) -> int | None:
    return None if score is None else int(score)


def _turn_keys(turn_id: str) -> list[str]:
    return [*keys.turn_keys(turn_id), keys.turn_cancel(turn_id), keys.turn_durable(turn_id)]


def _meta_or_none(turn_id: str | None, raw: Any) -> TurnMeta | None:
    if not turn_id or not raw:
        return None
    try:
        return TurnMeta.from_hash(turn_id, raw)
    except CorruptTurn:
        return None


def _started(entries: Any) -> TurnStarted | None:
    """A turn's ``turn_started`` from its read at stream id ``0-1``; None when unreadable."""
    event = decode_one(entries)
    return event if isinstance(event, TurnStarted) else None


__all__ = ["Conversation", "Conversations", "Erased", "Listed", "title_of"]
