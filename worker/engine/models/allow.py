"""Which model specs an API client may ask for (``DRES_MODELS``, docs/configuration.md); pure.

The default model is always allowed; so is every spec listed, and ``anthropic:*`` or
``openai:*`` allows that provider's every model. A ``scripted:`` spec names a file on the
server, so it is allowed only when that exact spec is listed: a client never gets a server file
read (or its parse errors echoed) by naming it. The CLI, a local user, is not held to the list.
"""

from __future__ import annotations

from collections.abc import Iterable

from worker.base.errors import ConfigError
from worker.engine.models import PROVIDERS
from worker.engine.models.providers import spelled

KINDS = frozenset({"scripted", *PROVIDERS})
#: a listed spec that allows every model of its provider: ``anthropic:*``
ANY = "*"


def parse_allowed(raw: str) -> frozenset[str]:
    """The specs of a ``DRES_MODELS`` value (comma-separated); a bad entry is a ``ConfigError``
    naming DRES_MODELS and the entry."""
    allowed: set[str] = set()
    for entry in (part.strip() for part in raw.split(",")):
        if entry:
            _check_entry(entry)
            allowed.add(entry)
    return frozenset(allowed)


def _check_entry(entry: str) -> None:
    kind, colon, arg = entry.partition(":")
    kinds = [f"{k}:MODEL" for k in sorted(PROVIDERS)]
    expected = f"expected {spelled(['scripted:/ABSOLUTE/PATH', *kinds, 'PROVIDER:*'])}"
    if not colon or kind not in KINDS or not arg:
        raise ConfigError(f"DRES_MODELS: bad entry {entry!r}: {expected}")
    if kind == "scripted" and ANY in arg:
        raise ConfigError(
            f"DRES_MODELS: bad entry {entry!r}: a scripted model names a server file; "
            "list each script by its exact path"
        )
    if kind == "scripted" and not arg.startswith("/"):
        raise ConfigError(f"DRES_MODELS: bad entry {entry!r}: a script's path must be absolute")
    if ANY in arg and arg != ANY:
        raise ConfigError(f"DRES_MODELS: bad entry {entry!r}: '*' stands alone ({kind}:*)")


def model_refusal(spec: str | None, *, default: str, allowed: Iterable[str]) -> str | None:
    """Why an API client may not ask for ``spec``, in one line; None when it may.

    ``spec`` None or empty asks for the default model (``default``, the spec the server uses).
    """
    if not spec or spec == default:
        return None
    allowed = frozenset(allowed)
    kind, _, arg = spec.partition(":")
    if spec in allowed and arg != ANY:
        return None
    if kind in PROVIDERS and arg and ANY not in arg and f"{kind}:{ANY}" in allowed:
        return None
    return (
        f"model {spec!r} is not allowed on this server: it serves its default model and the "
        "specs listed in DRES_MODELS (add the spec there to allow it)"
    )
