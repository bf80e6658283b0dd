"""Errors of the worker package. One root, shallow, picklable (plain args only).

``DresError`` derives from ``ledger.errors.DresBaseError``, as ``LedgerError`` does. Interrupts
are another tier: ``Interrupt`` is a ``BaseException``, so no ``except Exception`` in a tool, an
SDK or a retry helper can swallow a Stop (as Celery's soft limit, an ``Exception``, can be).
"""

from __future__ import annotations

from ledger.errors import DresBaseError


class DresError(DresBaseError):
    """Root of every error the worker raises on purpose."""


class InvalidInput(DresError):
    """A request names something unusable (an empty message, an unknown mode)."""


class Interrupt(BaseException):
    """Ends the running run at the point it is raised, past every ``except Exception``."""


class ConfigError(DresError):
    """Bad configuration; the message is one line naming the variable."""


class LoopUnavailable(ConfigError):
    """A loop ``DRES_LOOP`` lists cannot be run here: its framework is not installed, its module
    cannot be imported, or its attribute is missing or not the framework's agent. One line."""


class ToolDefinitionError(DresError):
    """A ``@tool`` function or a DRES_TOOLS module cannot be registered."""


class JournalUnreadable(DresError):
    """A resumed run could not read its turn's ledger, so it must not run writes blind."""


class Unconfirmed(DresError):
    """A write's record could not be confirmed as ``DRES_DURABILITY`` asks: the run ends as a
    transport error does, and resumes (docs/faults.md)."""


class OutcomeUnknown(DresError):
    """A write whose request was sent but whose answer never came (a timeout, a dropped
    connection, a server that died mid-call): it may or may not have taken effect. The executor
    leaves the call without its ``tool_done`` (interrupted, docs/events.md) and the run ends as a
    transport error does; its resume meets the interrupted-write guard, or re-runs an idempotent
    call with the same key. Never an error result: that would let a blind retry through."""


class TurnCancelled(Interrupt):
    """Stop was requested for the turn; the run ends at this safe point."""


class SoftLimit(Interrupt):
    """The chunk reached its soft time limit: the turn goes on in its next chunk."""


class Shutdown(Interrupt):
    """The worker is shutting down (a deploy): the turn goes on in its next chunk, elsewhere."""


class ModelError(DresError):
    """A model call failed. ``code`` says how: the loop decides from it whether to resume.

    Codes: ``gateway_timeout``, ``connection_reset``, ``stream_ended``, ``http_5xx`` (resumable
    transport errors), ``rate_limit`` (resumable once, background only), ``auth`` and
    ``invalid_request`` (never resumable).
    """

    RESUMABLE = frozenset({"gateway_timeout", "connection_reset", "stream_ended", "http_5xx"})

    def __init__(self, code: str, message: str = "") -> None:
        super().__init__(code, message)
        self.code = code
        self.message = message

    @property
    def resumable(self) -> bool:
        return self.code in self.RESUMABLE

    def __str__(self) -> str:
        return f"{self.code}: {self.message}" if self.message else self.code


class Refused(DresError):
    """A request the state of its turn or conversation refuses now (a second message under
    ``DRES_DOUBLE_TEXT=reject``, a fork of a live turn into a new conversation, a chat request
    that carries nothing to take); the message says why. The HTTP wing answers 409."""


class QueueFull(DresError):
    """A new turn's tenant already has ``DRES_TENANT_MAX_QUEUED`` turns waiting to start: nothing
    is recorded; the HTTP wing answers 429 with ``Retry-After: retry_after_s``."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message, retry_after_s)
        self.retry_after_s = retry_after_s

    def __str__(self) -> str:
        return str(self.args[0])
