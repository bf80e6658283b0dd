"""What a turn spent on model calls (docs/events.md), as a fold over its events.

Each ``model_done`` carries the call's ``usage`` as its provider reported it; a turn's sum is
those added up. The turn's token budget (``DRES_TURN_TOKEN_BUDGET``, docs/semantics.md) counts
what it spent since its start or its last Continue: a Continue grants the allowance again.
"""

from __future__ import annotations

from collections.abc import Iterable

from ledger.events import Event, ModelDone, Resumed, TokenUsage

#: the causes of a resume that a Continue asked for
CONTINUE_CAUSES = frozenset({"continue", "auto_continue"})


class UsageFold:
    """The turn's spend, whole and since its last Continue; fed in steps, copied at any point."""

    __slots__ = ("input_tokens", "output_tokens", "since_continue")

    def __init__(self) -> None:
        self.input_tokens = 0
        self.output_tokens = 0
        #: tokens (input + output) spent since the turn's start or its last Continue
        self.since_continue = 0

    def feed(self, events: Iterable[Event]) -> UsageFold:
        for event in events:
            if isinstance(event, ModelDone):
                if event.usage is not None:
                    self.input_tokens += event.usage.input_tokens
                    self.output_tokens += event.usage.output_tokens
                    self.since_continue += event.usage.total
            elif isinstance(event, Resumed) and event.cause in CONTINUE_CAUSES:
                self.since_continue = 0
        return self

    def copy(self) -> UsageFold:
        twin = UsageFold()
        twin.input_tokens = self.input_tokens
        twin.output_tokens = self.output_tokens
        twin.since_continue = self.since_continue
        return twin

    def over(self, budget: int) -> str | None:
        """Why the turn may make no further model call under ``budget``, or None."""
        if self.since_continue < budget:
            return None
        return f"the turn spent {self.since_continue} tokens of its budget of {budget}"

    def spent(self) -> TokenUsage:
        return TokenUsage(input_tokens=self.input_tokens, output_tokens=self.output_tokens)
