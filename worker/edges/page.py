"""The web page of ``dres api`` at ``/`` (CONTRACT §10): one HTML document, nothing else served.

The page is ``static/index.html`` with its stylesheet and script inlined, so it needs no route
beyond ``/`` and fetches nothing from anywhere but the public ``/v1`` API. The one setting the
page must know, ``DRES_MAX_AUTO_CONTINUE`` (how often it may continue a time-limit stop on its
own, §7.7), is written into the document as a ``<meta>`` value.
"""

from __future__ import annotations

import html
from functools import cache
from importlib import resources

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from worker.base.settings import Settings

router = APIRouter(include_in_schema=False)


@cache
def _static(name: str) -> str:
    return resources.files("worker.edges").joinpath("static", name).read_text(encoding="utf-8")


def render(settings: Settings) -> str:
    """The page with its style and script inlined and the auto-continue limit filled in."""
    # The inlined files are ours and contain no "</style>" or "</script>"; the value is escaped.
    return (
        _static("index.html")
        .replace("{{max_auto_continue}}", html.escape(str(settings.max_auto_continue)))
        .replace("{{style}}", _static("style.css"))
        .replace("{{script}}", _static("app.js"))
    )


@router.get("/", response_class=HTMLResponse)
def page(request: Request) -> HTMLResponse:
    settings: Settings = request.app.state.settings
    return HTMLResponse(
        render(settings),
        headers={
            "Cache-Control": "no-cache",
            # nothing from outside: the page talks to this server only
            "Content-Security-Policy": (
                "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'"
            ),
        },
    )
