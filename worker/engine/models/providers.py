"""Provider adapters (docs/models.md): Anthropic and OpenAI(-compatible) chat models, streaming.

Each adapter speaks through the provider's official SDK, imported when the adapter is built so
the rest of dres runs without it; ``wire`` translates the requests and the streams. Text deltas
are yielded as they arrive; a tool call once its JSON input is complete. Failures become
``ModelError`` codes (docs/semantics.md): timeouts ``gateway_timeout``; dropped connections
``connection_reset``; a stream with no final event ``stream_ended``; HTTP 5xx ``http_5xx``; 429
and Anthropic's 529 "overloaded" ``rate_limit``; 401/402/403 and missing credentials ``auth``;
any other 4xx ``invalid_request``.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Iterator
from functools import partial
from typing import Any, ClassVar

from ledger.note import shorten
from worker.base.errors import ConfigError, ModelError
from worker.engine.models.base import ChatModel, ModelEvent, ModelRequest
from worker.engine.models.wire import (
    anthropic_events,
    anthropic_messages,
    anthropic_tools,
    openai_events,
    openai_messages,
    openai_tools,
)

#: tokens one model response may generate
DEFAULT_MAX_TOKENS = 4096
#: retries the SDK makes on its own before dres's resume (with the journal note) takes over
DEFAULT_MAX_RETRIES = 2
#: characters of a provider's error message kept in a ModelError
MESSAGE_CHARS = 300
_cut = partial(shorten, limit=MESSAGE_CHARS)

#: HTTP statuses with a code of their own (529 is Anthropic's "overloaded", a rate limit by
#: docs/semantics.md); any other is ``http_5xx`` (5xx) or ``invalid_request`` (4xx)
STATUSES = {
    **dict.fromkeys([401, 402, 403], "auth"),
    **dict.fromkeys([429, 529], "rate_limit"),
    408: "gateway_timeout",
}
#: a provider's rate limits (Anthropic's 529 is "overloaded")
RATE_LIMIT_STATUSES = frozenset({429, 529})
#: the error type of an error event inside a 200 stream -> code; unknown types are ``http_5xx``
ERROR_TYPES = {
    **dict.fromkeys(["overloaded_error", "rate_limit_error", "rate_limit_exceeded"], "rate_limit"),
    **dict.fromkeys(["authentication_error", "permission_error", "billing_error"], "auth"),
    **dict.fromkeys(["invalid_request_error", "not_found_error"], "invalid_request"),
    "request_too_large": "invalid_request",
    "timeout_error": "gateway_timeout",
}


class _Adapter:
    """A model over one provider's SDK. ``timeout`` is in seconds (None: the SDK's default);
    ``base_url`` and ``api_key`` left None are read by the SDK from its own environment."""

    #: the SDK's import name, which is also the spec prefix and the dres extra
    kind: ClassVar[str]
    client_class: ClassVar[str]
    base_error: ClassVar[str]

    def __init__(
        self,
        model: str,
        *,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        max_retries: int = DEFAULT_MAX_RETRIES,
        timeout: float | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
    ) -> None:
        self.name = f"{self.kind}:{model}"
        self.model = model
        self.max_tokens = max_tokens
        try:
            self._sdk: Any = importlib.import_module(self.kind)
        except ImportError as e:
            raise ConfigError(
                f"model spec {self.name}: the {self.kind} package is not installed "
                f"(pip install 'dres[{self.kind}]')"
            ) from e
        options = {"timeout": timeout, "base_url": base_url, "api_key": api_key}
        self._options: dict[str, Any] = {k: v for k, v in options.items() if v is not None}
        self._options["max_retries"] = max_retries
        self._client: Any = None

    def stream(self, request: ModelRequest) -> Iterator[ModelEvent]:
        try:
            yield from self._events(self._connect(), request)
        except Exception as e:
            error = model_error(self._sdk, e)
            if error is None:
                raise
            raise error from e

    def close(self) -> None:
        """Close the SDK client (its connection pool), if one was made."""
        client, self._client = self._client, None
        if client is not None:
            client.close()

    def _connect(self) -> Any:
        if self._client is None:
            options = dict(self._options)
            http_client = getattr(self._sdk, "DefaultHttpxClient", None)
            if http_client is not None:  # the SDK's own defaults, plus one response hook
                options["http_client"] = http_client(
                    event_hooks={"response": [rate_limits_not_retried]}
                )
            try:
                self._client = getattr(self._sdk, self.client_class)(**options)
            except getattr(self._sdk, self.base_error) as e:
                # The OpenAI client refuses to be built without credentials.
                raise ModelError("auth", _cut(str(e))) from e
        return self._client

    def _events(self, client: Any, request: ModelRequest) -> Iterator[ModelEvent]:
        raise NotImplementedError


class AnthropicModel(_Adapter):
    kind = "anthropic"
    client_class = "Anthropic"
    base_error = "AnthropicError"

    def _events(self, client: Any, request: ModelRequest) -> Iterator[ModelEvent]:
        kwargs: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": anthropic_messages(request.messages),
        }
        if request.system:
            kwargs["system"] = request.system
        if request.tools:
            kwargs["tools"] = anthropic_tools(request.tools)
        try:
            stream = client.messages.create(stream=True, **kwargs)
        except TypeError as e:
            # Raised before any request when no API key, token or credentials were found.
            if "authentication" not in str(e):
                raise
            raise ModelError("auth", _cut(str(e))) from e
        with stream:
            yield from anthropic_events(stream)


class OpenAIModel(_Adapter):
    kind = "openai"
    client_class = "OpenAI"
    base_error = "OpenAIError"

    def _events(self, client: Any, request: ModelRequest) -> Iterator[ModelEvent]:
        kwargs: dict[str, Any] = {
            "model": self.model,
            "max_completion_tokens": self.max_tokens,
            "messages": openai_messages(request.system, request.messages),
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            kwargs["tools"] = openai_tools(request.tools)
        with client.chat.completions.create(stream=True, **kwargs) as stream:
            yield from openai_events(stream)


#: every provider by its spec prefix: a new provider is its adapter class and one entry here
ADAPTERS: dict[str, type[_Adapter]] = {cls.kind: cls for cls in (AnthropicModel, OpenAIModel)}


def spelled(options: list[str]) -> str:
    """``a, b or c``: the choices of a message."""
    return " or ".join(filter(None, [", ".join(options[:-1]), options[-1]]))


def make(kind: str, model: str) -> ChatModel:
    """The adapter for a ``kind:model`` spec (a provider of ``ADAPTERS``)."""
    if kind not in ADAPTERS:
        raise ConfigError(
            f"model spec {kind}:{model}: unknown provider; expected {spelled(sorted(ADAPTERS))}"
        )
    return ADAPTERS[kind](model)


def rate_limits_not_retried(response: Any) -> None:
    """What a rate limit does is dres's to decide (docs/semantics.md: a foreground turn stops, a
    background one resumes once after a cooldown): the SDK must not retry it on its own, which
    would sleep out a ``Retry-After`` of any length inside the chunk. Both SDKs obey
    ``x-should-retry`` before anything else; other statuses keep the SDK's retries."""
    if response.status_code in RATE_LIMIT_STATUSES:
        response.headers["x-should-retry"] = "false"


# -- errors --------------------------------------------------------------------------------


def model_error(sdk: Any, e: Exception) -> ModelError | None:
    """The ModelError an SDK or transport exception stands for; None for anything else.

    An interrupt found in ``e`` or in its chain of causes and contexts is raised as itself
    (docs/faults.md): an SDK that wrapped it (``APIConnectionError`` from Celery's
    ``SoftTimeLimitExceeded``, where dres's trap is not armed) must not turn it into a resumable
    transport error.
    """
    interrupt = wrapped_interrupt(e)
    if interrupt is not None:
        raise interrupt
    timeouts, transport = _transport_errors()
    if isinstance(e, (sdk.APITimeoutError, *timeouts)):
        return ModelError("gateway_timeout", _cut(str(e)))
    if isinstance(e, (sdk.APIConnectionError, *transport)):
        # The SDK's own message is a bare "Connection error."; the cause says which.
        cause = e.__cause__ if isinstance(e, sdk.APIConnectionError) else None
        return ModelError("connection_reset", _cut(f"{e} {cause}" if cause else str(e)))
    if isinstance(e, sdk.APIStatusError) and e.status_code >= 400:
        fallback = "http_5xx" if e.status_code >= 500 else "invalid_request"
        return ModelError(STATUSES.get(e.status_code, fallback), _cut(str(e)))
    if isinstance(e, sdk.APIError):
        # An error event inside a stream that began 200 OK: classify by its error type.
        body = e.body if isinstance(e.body, dict) else {}
        error = body.get("error", body)
        error = error if isinstance(error, dict) else {}
        code = ERROR_TYPES.get(str(error.get("type"))) or ERROR_TYPES.get(str(error.get("code")))
        return ModelError(code or "http_5xx", _cut(str(e)))
    if isinstance(e, json.JSONDecodeError):
        return ModelError("stream_ended", _cut(f"the stream broke off mid-event: {e}"))
    return None


def wrapped_interrupt(e: BaseException) -> BaseException | None:
    """The first interrupt in ``e``'s chain (itself, then its causes and contexts), or None.

    An interrupt is a ``BaseException`` that is not an ``Exception`` (dres's ``Interrupt``,
    ``KeyboardInterrupt``), or Celery's ``SoftTimeLimitExceeded`` (an ``Exception``) when the
    process runs Celery: it is looked up where Celery loaded it, as the engine never imports
    Celery.
    """
    billiard = sys.modules.get("billiard.exceptions")
    soft_limit = getattr(billiard, "SoftTimeLimitExceeded", None)
    seen: set[int] = set()
    chain: list[BaseException] = [e]
    while chain:
        current = chain.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        if not isinstance(current, Exception) or (
            soft_limit is not None and isinstance(current, soft_limit)
        ):
            return current
        chain += [c for c in (current.__cause__, current.__context__) if c is not None]
    return None


def _transport_errors() -> tuple[tuple[type[Exception], ...], tuple[type[Exception], ...]]:
    """Timeout and transport error classes of the HTTP library the SDK runs on (httpx, or
    httpx2 in newer SDKs). The SDKs wrap these when sending, but not every SDK version wraps
    them while a streamed body is being read."""
    libs = [sys.modules[n] for n in ("httpx", "httpx2") if n in sys.modules]
    return tuple(m.TimeoutException for m in libs), tuple(m.RequestError for m in libs)
