"""The parsers of the settings' values that are more than a type: the Sentinels, the TLS options
of a Sentinel's ``rediss://`` URL, ``DRES_APPROVAL``, the URLs of webhooks and their secret,
and the tokens (the API's, the approvers'). Each raises a ``ValueError`` saying what is wrong,
which the settings turn into one line naming the variable.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any
from urllib.parse import parse_qs, urlsplit

from redis.connection import parse_url

#: a tool's name as DRES_APPROVAL lists it
NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")
HTTP_URL = re.compile(r"^https?://[^/\s]+\S*$")
#: characters a bearer token must have at least (the API's, each approver's): a guessable token
#: is no lock (``secrets.token_urlsafe()`` gives 43)
MIN_TOKEN_CHARS = 32
#: characters of an approver's name at most: a decision's ``by`` (docs/http-api.md)
MAX_NAME_CHARS = 200


def parse_sentinels(raw: str) -> list[tuple[str, int]]:
    """DRES_REDIS_SENTINELS's ``(host, port)`` pairs."""
    pairs = []
    for entry in (part.strip() for part in raw.split(",")):
        if not entry:
            continue
        host, _, port = entry.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{entry!r} is not host:port (e.g. 10.0.0.5:26379,10.0.0.6:26379)")
        pairs.append((host.strip("[]"), int(port)))
    return pairs


#: the TLS options a ``rediss://`` DRES_REDIS_URL may carry in its query under Sentinel, for the
#: master and the Sentinels alike: those both of redis-py's clients take (the workers'
#: ``redis.Redis``, the API's ``redis.asyncio.Redis``: the latter has no OCSP options)
SENTINEL_TLS_OPTIONS = frozenset(
    {
        "ssl_ca_certs",
        "ssl_ca_data",
        "ssl_ca_path",
        "ssl_cert_reqs",
        "ssl_certfile",
        "ssl_check_hostname",
        "ssl_ciphers",
        "ssl_exclude_verify_flags",
        "ssl_include_verify_flags",
        "ssl_keyfile",
        "ssl_min_version",
        "ssl_password",
    }
)
#: ``ssl_cert_reqs`` values redis-py knows (its default: ``required``)
CERT_REQS = ("none", "optional", "required")


def parse_sentinel_tls(url: str) -> dict[str, Any]:
    """DRES_REDIS_URL's TLS options under Sentinel: none for ``redis://``; for ``rediss://``,
    ``ssl=True`` and the ``ssl_*`` options of its query, read as redis-py's ``from_url`` reads
    them, which dres gives the master's connections and the Sentinels' alike. A ``ValueError``
    naming what cannot work: another scheme, a query option not used through Sentinel (only
    the URL's password, database (its path) and TLS options are), a TLS option on
    ``redis://``."""
    parts = urlsplit(url)
    if parts.scheme not in {"redis", "rediss"}:
        raise ValueError(
            "must be a redis:// or rediss:// URL with DRES_REDIS_SENTINELS (only its password, "
            "database and TLS options are used)"
        )
    for name in parse_qs(parts.query):
        if name.startswith("ssl_") and name not in SENTINEL_TLS_OPTIONS:
            raise ValueError(
                f"{name} cannot be used through Sentinel: the API's client (redis.asyncio) has "
                "no such option"
            )
        if name not in SENTINEL_TLS_OPTIONS:
            raise ValueError(
                f"{name} is not used through Sentinel: only the URL's password, database (its "
                "path) and ssl_* options are"
            )
        if parts.scheme == "redis":
            raise ValueError(f"{name} is a TLS option: use a rediss:// URL")
    try:
        parsed = parse_url(url)  # type: ignore[no-untyped-call]  # (unannotated)
    except ValueError as e:
        raise ValueError(str(e)) from None
    if parsed.get("ssl_cert_reqs", "required") not in CERT_REQS:
        raise ValueError(f"ssl_cert_reqs must be one of {', '.join(CERT_REQS)}")
    if parts.scheme == "redis":
        return {}
    return {"ssl": True} | {k: v for k, v in parsed.items() if k in SENTINEL_TLS_OPTIONS}


def parse_approval(raw: str) -> tuple[bool, frozenset[str]]:
    """DRES_APPROVAL as (every write waits, the tool names that wait)."""
    if not all(NAME.fullmatch(name.strip()) for name in raw.split(",")):
        raise ValueError(f"must be none, writes, or comma-separated tool names (got '{raw}')")
    names = {name.strip() for name in raw.split(",")}
    if names <= {"none"}:
        return False, frozenset()
    if "writes" in names:
        return True, frozenset(names - {"writes"})
    return False, frozenset(names - {"none"})


def parse_http_url(raw: str) -> str:
    """An optional http(s) URL: empty, or one."""
    if raw and not HTTP_URL.fullmatch(raw):
        # the value is not repeated: a webhook's URL may be its credential
        raise ValueError("must be an http:// or https:// URL")
    return raw


def parse_webhook_secret(raw: str) -> str:
    """An optional Standard Webhooks secret: empty, or ``whsec_`` and the key in base64."""
    if not raw:
        return raw
    key = raw.removeprefix("whsec_").rstrip("=")
    try:  # padded or not, as the Standard Webhooks libraries take it
        decoded = base64.b64decode(key + "=" * (-len(key) % 4), validate=True)
    except binascii.Error:
        decoded = b""
    if not raw.startswith("whsec_"):
        decoded = b""
    if not decoded:
        raise ValueError("must be a Standard Webhooks secret: whsec_ and a base64 key")
    return raw


def check_token(token: str) -> str:
    """A bearer token long enough not to be guessed."""
    if len(token) < MIN_TOKEN_CHARS:
        raise ValueError(
            f"must be at least {MIN_TOKEN_CHARS} characters (has {len(token)}); make one with "
            "python3 -c 'import secrets; print(secrets.token_urlsafe())'"
        )
    return token


def parse_approver_tokens(raw: str) -> dict[str, str]:
    """DRES_APPROVER_TOKENS: ``{"NAME": "TOKEN"}``, each name a decision's ``by`` (1 to 200
    characters, not blank), each token long enough and used by one approver only."""
    try:
        found = json.loads(raw or "{}")
    except json.JSONDecodeError as e:
        raise ValueError(f'must be a JSON object {{"NAME": "TOKEN"}}: {e.msg}') from None
    if not isinstance(found, dict):
        raise ValueError('must be a JSON object {"NAME": "TOKEN"}')
    for name, token in found.items():
        if not name.strip() or len(name) > MAX_NAME_CHARS:
            raise ValueError(f"an approver's name must be 1 to {MAX_NAME_CHARS} characters")
        if not isinstance(token, str):
            raise ValueError(f"the token of {name!r} must be a string")
        try:
            check_token(token)
        except ValueError as e:
            raise ValueError(f"the token of {name!r} {e}") from None
    if len(set(found.values())) < len(found):
        raise ValueError("two approvers have the same token: a decision must name one person")
    return found
