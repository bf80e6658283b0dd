"""What a secret looks like where a person reads it (``dres config``, ``dres up``'s banner, log
lines): a URL's password, and with its path, what a webhook URL hides there."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

MASK = "****"


def mask_url(url: str, *, path: bool = False) -> str:
    """The URL with the password of its userinfo masked (a user name alone is kept); with
    ``path``, its path, query and fragment too (scheme and host stay, to say where it points)."""
    parts = urlsplit(url)
    if parts.password is not None:
        host = parts.netloc.rpartition("@")[2]
        parts = parts._replace(netloc=f"{parts.username or ''}:{MASK}@{host}")
    if path:
        parts = parts._replace(
            path=f"/{MASK}" if parts.path.strip("/") else parts.path,
            query=MASK if parts.query else "",
            fragment=MASK if parts.fragment else "",
        )
    return urlunsplit(parts)
