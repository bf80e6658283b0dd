"""The web page of ``dres api`` at ``/`` (docs/http-api.md): an HTML document and its script
modules.

The page is ``static/index.html`` with its stylesheet inlined; its script is a set of ES modules
(``static/*.js``, no build step) served as they are at ``/static/NAME.js``, and it fetches nothing
from anywhere but this server: the modules and the public ``/v1`` API. The settings the
page must know, ``DRES_MAX_AUTO_CONTINUE`` (how often it may continue a time-limit stop on its
own, docs/semantics.md) and whether ``DRES_APPROVER_TOKENS`` is set, are written into the document
as ``<meta>`` values.
"""

from __future__ import annotations

import html
from functools import cache
from importlib import resources

from fastapi import APIRouter, HTTPException, Path, Request
from fastapi.responses import HTMLResponse, Response

from worker.base.settings import Settings

router = APIRouter(include_in_schema=False)

#: nothing from outside: the page talks to this server only, and runs only its own modules; no
#: other site may frame it (a framed page's buttons could be clicked through a decoy)
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; "
    "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)


@cache
def _static(name: str) -> str:
    return resources.files("worker.edges.http").joinpath("static", name).read_text(encoding="utf-8")


def render(settings: Settings) -> str:
    """The page with its style inlined, the auto-continue limit and whether approvers decide
    (DRES_APPROVER_TOKENS: the page then asks for an approver's token) filled in."""
    # The inlined file is ours and contains no "</style>"; the values are escaped.
    return (
        _static("index.html")
        .replace("{{max_auto_continue}}", html.escape(str(settings.max_auto_continue)))
        .replace("{{approvers}}", "1" if settings.approvers else "0")
        .replace("{{style}}", _static("style.css"))
    )


@router.get("/", response_class=HTMLResponse)
def page(request: Request) -> HTMLResponse:
    settings: Settings = request.app.state.settings
    return HTMLResponse(
        render(settings),
        headers={
            "Cache-Control": "no-cache",
            "Content-Security-Policy": CSP,
            "X-Frame-Options": "DENY",  # frame-ancestors for browsers that predate it
        },
    )


@router.get("/static/{name}")
def module(name: str = Path(pattern=r"^[a-z]+\.js$")) -> Response:
    """One of the page's ES modules, as it is in ``static/``."""
    try:
        text = _static(name)
    except FileNotFoundError:
        raise HTTPException(404, f"no module {name!r}") from None
    return Response(
        text,
        media_type="text/javascript",
        headers={"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"},
    )
