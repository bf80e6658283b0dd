"""A conversation's line (docs/semantics.md, one live turn per conversation): which turn of it may
run, resume or wait now, and the turns of it that have not ended.

The line is one key beside the conversation's list (``keys.conversation_line``): the id of the
turn that holds it, set and cleared only by compare-and-set (``lua/line.lua``), so of any number of
API processes, workers and reapers letting turns through at once, one wins. A turn is let through
(its run sent) only by whoever set the line to it; the line is cleared only once its holder has
ended. The turns that have not ended are always the newest of the list (a turn becomes live again
only by Continue, which is allowed for the newest stop), so reading them costs what the live end
of the list holds, not the conversation's length.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from ledger import keys
from ledger.codec import text
from ledger.errors import CorruptTurn
from ledger.store import Ledger, MetaValue, script
from ledger.turn import TurnMeta

#: turns read per page of the list's live end
PAGE = 8


@dataclass(frozen=True, slots=True)
class Look:
    """The line as one round trip reads it: its holder ("" none) and the list's newest turn."""

    holder: str
    newest: str


class Lines:
    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.client = ledger.client
        self._cas = self.client.register_script(script("line.lua"))

    def look(self, conversation_id: str) -> Look:
        def read() -> Any:
            pipe = self.client.pipeline(transaction=False)
            pipe.get(keys.conversation_line(conversation_id))
            pipe.lindex(keys.conversation_turns(conversation_id), -1)
            return pipe.execute()

        holder, newest = self.ledger.retry(read, "read")
        return Look("" if holder is None else text(holder), "" if newest is None else text(newest))

    def set(self, conversation_id: str, expected: str, holder: str) -> bool:
        """Make ``holder`` ("" none) the line's holder if it is ``expected`` now."""
        line = [keys.conversation_line(conversation_id)]
        args: list[MetaValue] = [expected, holder, self.ledger.finished_ttl_s]
        return bool(int(self.ledger.retry(lambda: self._cas(keys=line, args=args))))

    def unended(self, conversation_id: str) -> list[TurnMeta]:
        """The conversation's turns that have not ended, oldest first: the newest turns of its
        list back to the first that ended (a turn whose keys are gone counts as ended)."""
        found: list[TurnMeta] = []
        conv = keys.conversation_turns(conversation_id)
        end = -1
        while True:
            start = end - PAGE + 1
            listed = self.ledger.retry(partial(self.client.lrange, conv, start, end), "read")
            ids = [text(t) for t in listed]
            metas = self.metas(ids)
            for meta in reversed(metas):
                if meta is None or meta.ended:
                    return found[::-1]
                found.append(meta)
            if len(ids) < PAGE:
                return found[::-1]
            end = start - 1

    def turn_ids(self, conversation_id: str) -> list[str]:
        """Every turn of the conversation's list, oldest first."""
        conv = keys.conversation_turns(conversation_id)
        return [text(t) for t in self.ledger.retry(lambda: self.client.lrange(conv, 0, -1))]

    def metas(self, turn_ids: Sequence[str]) -> list[TurnMeta | None]:
        """Each turn's metadata in one round trip (None: gone or unreadable)."""
        if not turn_ids:
            return []

        def read() -> Any:
            pipe = self.client.pipeline(transaction=False)
            for turn_id in turn_ids:
                pipe.hgetall(keys.turn_meta(turn_id))
            return pipe.execute()

        raws = self.ledger.retry(read, "read")
        return [_meta(t, raw) for t, raw in zip(turn_ids, raws, strict=True)]


def _meta(turn_id: str, raw: Any) -> TurnMeta | None:
    if not raw:
        return None
    try:
        return TurnMeta.from_hash(turn_id, raw)
    except CorruptTurn:
        return None


__all__ = ["Lines", "Look"]
