"""The model an API client asks for: allowed (``DRES_MODELS``, docs/configuration.md) and usable, or
refused.

The allow-list is checked before anything touches a file the spec names. A spec that is allowed
but cannot be built (a listed script that is missing or broken) is refused with a generic line:
what is wrong with a server file goes to the server's log, never to the client.
"""

from __future__ import annotations

import structlog
from starlette.exceptions import HTTPException

from worker.base.errors import ConfigError
from worker.base.settings import Settings
from worker.edges.runtime import Runtime
from worker.engine.models import demo_script_path, make_model
from worker.engine.models.allow import model_refusal, parse_allowed

log = structlog.get_logger("dres.api")


def default_spec(settings: Settings) -> str:
    """The spec of the model a turn gets when it names none."""
    return settings.model or f"scripted:{demo_script_path()}"


def check_allow_list(settings: Settings) -> None:
    """At start: a bad ``DRES_MODELS`` is a ``ConfigError`` naming it."""
    parse_allowed(settings.models)


def admit_model(rt: Runtime, spec: str | None) -> None:
    """Refuse ``spec`` with 422 unless an API client may use it; 500 if the default is broken."""
    settings = rt.settings
    default = default_spec(settings)
    reason = model_refusal(spec, default=default, allowed=parse_allowed(settings.models))
    if reason is not None:
        raise HTTPException(422, reason)
    chosen = spec or default
    try:
        make_model(chosen, rt.clock)
    except ConfigError as e:
        if not chosen.startswith("scripted:"):
            raise  # a provider spec's reason (no model name, no SDK) names no server file
        log.warning("model_unusable", spec=chosen, error=str(e))
        if not spec:
            raise HTTPException(500, "the server's default model cannot be loaded") from None
        raise HTTPException(
            422, f"model {spec!r} is allowed but cannot be loaded on this server"
        ) from None
