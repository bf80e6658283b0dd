"""Structured logging: structlog for dres's own logs, stdlib logs (Celery, uvicorn, the ledger)
through it, rendered for a person (``console``, the default) or as one JSON object per line
(``DRES_LOG_FORMAT=json``, docs/configuration.md).

Nothing a log line says carries a secret or a tool's input or result (docs/security.md): httpx
and httpcore log at WARNING and above only, since httpx's INFO line names every request's full
URL (an OpenAPI call's path parameters, a webhook's secret path or ``?token=``); and every URL in
a line's text fields, dres's and the libraries' alike, is masked (``mask_secrets``: its password
and query values, ``worker.base.masking``).

Context such as ``turn_id``, ``run_id``, ``chunk`` and ``epoch`` is bound once per chunk in
contextvars (``worker.edges.celery.app`` and the lifecycle's claim) and merged into every log line
of that chunk, dres's and Celery's alike.
"""

from __future__ import annotations

import logging
import sys

import structlog

from worker.base.masking import mask_text
from worker.base.settings import Settings

#: libraries whose lines below WARNING carry URLs or traffic: held at WARNING whatever the level
#: (``httpx2``: the MCP SDK's HTTP client, whose INFO line names each request's URL and query)
QUIET_LOGGERS = ("httpx", "httpcore", "httpx2", "httpcore2")


def mask_secrets(
    _logger: object, _method: str, event: structlog.types.EventDict
) -> structlog.types.EventDict:
    """Every URL in the line's text fields masked (its message, an ``error``, a ``url``)."""
    for key, value in event.items():
        if isinstance(value, str) and "://" in value:
            event[key] = mask_text(value)
    return event


def configure_logging(level: str = "INFO", *, json: bool = False) -> None:
    """Send every log record, structlog's and the standard library's, to stderr in one format."""
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    rendering: list[structlog.types.Processor] = (
        # a traceback becomes one string field, so a line stays one object
        [structlog.processors.format_exc_info, mask_secrets, structlog.processors.JSONRenderer()]
        if json
        # plain tracebacks: the rich ones print every local and stall a server on each error
        else [
            mask_secrets,
            structlog.dev.ConsoleRenderer(
                colors=False, exception_formatter=structlog.dev.plain_traceback
            ),
        ]
    )
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *rendering],
            foreign_pre_chain=[*shared, structlog.stdlib.ExtraAdder()],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    # warnings (Celery's SecurityWarning, deprecations) are log lines too, not raw text
    logging.captureWarnings(True)


def configure_logging_for(settings: Settings, level: str = "INFO") -> None:
    """The process's logging in the format its settings ask for (``DRES_LOG_FORMAT``)."""
    configure_logging(level, json=settings.log_format == "json")
