"""Who may reach the API at all (docs/http-api.md, "Who may call"), before any route runs: a
browser on another site must not be able to drive a dres on this machine.

- With no DRES_API_TOKEN the API listens on loopback only, yet a page elsewhere can still reach
  it through a DNS name it rebinds to 127.0.0.1: its requests carry that name as ``Host``. So a
  tokenless API answers only a loopback ``Host`` (``localhost``, ``127.0.0.0/8``, ``[::1]``, any
  port) and refuses any other with 421.
- A cross-site form (``application/x-www-form-urlencoded`` needs no CORS preflight) can POST to
  any origin, token or not, when the token is not needed or a proxy adds it: so a write (any
  method but GET, HEAD, OPTIONS) whose ``Origin`` is present and is not the API's own is refused
  with 403, and so is one with no ``Origin`` whose ``Sec-Fetch-Site`` says ``cross-site`` (a
  browser that left ``Origin`` out). A client that is not a browser sends neither and is let
  through.

Both refusals are JSON ``{"detail": …}`` as every error is (Starlette's ``TrustedHostMiddleware``
answers plain text, and knows no loopback range).
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from fastapi.responses import JSONResponse
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from worker.base.settings import Settings

#: the methods that change nothing: a foreign ``Origin`` on these is left to the token
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: a scheme's port when a URL names none
DEFAULT_PORTS = {"http": 80, "https": 443}


def _split(authority: str) -> tuple[str, int | None] | None:
    """``host[:port]`` (``[::1]:8000`` too) as (lower-case host, port), or None if malformed."""
    try:
        parts = urlsplit(f"//{authority}")
        return (parts.hostname or "", parts.port)
    except ValueError:
        return None


def loopback_host(host: str | None) -> bool:
    """Whether a ``Host`` header names this machine's loopback, by name or address."""
    split = _split(host or "")
    if split is None or not split[0]:
        return False
    name = split[0]
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def same_origin(origin: str, scheme: str, host: str | None) -> bool:
    """Whether ``Origin`` is the request's own origin: ``scheme://host:port`` of its ``Host``
    (``null``, a sandboxed or local document's, is no origin's)."""
    own = _split(host or "")
    try:
        parts = urlsplit(origin)
        theirs = (parts.scheme, parts.hostname, parts.port)
    except ValueError:
        return False
    if own is None or not own[0] or theirs[0] != scheme:
        return False
    default = DEFAULT_PORTS.get(scheme)
    return (theirs[1], theirs[2] or default) == (own[0], own[1] or default)


class CallerCheck:
    """Refuse a request a page on another site made (the module's docstring says which)."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.tokenless = not settings.api_token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        host = headers.get("host")
        refusal: tuple[int, str] | None = None
        if self.tokenless and not loopback_host(host):
            refusal = (
                421,
                f"Host {host!r} is not a loopback name: without DRES_API_TOKEN this API answers "
                "only localhost, 127.0.0.0/8 and [::1]",
            )
        elif scope["method"] not in SAFE_METHODS:
            origin = headers.get("origin")
            if origin is not None and not same_origin(origin, scope["scheme"], host):
                refusal = (403, f"a write from another origin ({origin!r}) is refused")
            elif origin is None and headers.get("sec-fetch-site") == "cross-site":
                refusal = (403, "a write from another site (Sec-Fetch-Site: cross-site) is refused")
        if refusal is None:
            await self.app(scope, receive, send)
            return
        status, detail = refusal
        await JSONResponse({"detail": detail}, status)(scope, receive, send)
