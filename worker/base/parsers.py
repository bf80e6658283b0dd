"""The parsers of the settings' values that are more than a type: the Redis URLs, the
Sentinels, the TLS options of a Sentinel's ``rediss://`` URL, ``DRES_APPROVAL``, the URLs of
webhooks and their secret, and the tokens (the API's, the approvers'). Each raises a
``ValueError`` saying what is wrong, which the settings turn into one line naming the variable.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any
from urllib.parse import parse_qs, quote, unquote_plus, urlsplit, urlunsplit

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


#: the schemes of a Redis URL, as redis-py reads them
REDIS_SCHEMES = ("redis", "rediss", "unix")
#: a Redis URL's example, for the lines that say one is malformed
REDIS_EXAMPLE = "e.g. redis://localhost:6379/0"


def parse_redis_url(raw: str) -> str:
    """A Redis URL that redis-py and Celery's broker both read (DRES_REDIS_URL; a
    DRES_BROKER_URL that is a Redis; a ``?password=`` the settings then move into its userinfo,
    where the broker reads it: ``credentials_in_userinfo``). The value is never repeated in the
    ``ValueError``: its userinfo may hold a password, and a malformed URL's secret cannot be told
    from its host."""
    scheme, sep, _ = raw.partition("://")
    if not sep or scheme.lower() not in REDIS_SCHEMES:
        raise ValueError(f"must start with redis://, rediss:// or unix:// ({REDIS_EXAMPLE})")
    parts = urlsplit(raw)
    try:
        parts.port  # noqa: B018 (urllib checks the port when it is read)
    except ValueError:
        raise ValueError(f"its port must be a number up to 65535 ({REDIS_EXAMPLE})") from None
    database = parts.path.strip("/")
    if scheme.lower() != "unix" and database and not database.isdigit():
        raise ValueError(f"its path must be a database number ({REDIS_EXAMPLE})")
    if scheme.lower() == "unix" and not parts.path:
        raise ValueError("a unix:// URL must name the socket's path (unix:///run/redis.sock)")
    try:
        parse_url(raw)  # type: ignore[no-untyped-call]  # (unannotated)
    except (ValueError, TypeError) as e:
        raise ValueError(str(e).splitlines()[0] if str(e) else type(e).__name__) from None
    return raw


def parse_broker_url(raw: str) -> str:
    """DRES_BROKER_URL: empty (the ledger's Redis), a Redis URL as ``parse_redis_url`` checks
    it, or another transport's URL (``sentinel://``, ``amqp://``), which Celery reads."""
    if not raw:
        return raw
    scheme, sep, _ = raw.partition("://")
    if not sep:
        raise ValueError(f"must be a URL with its scheme ({REDIS_EXAMPLE})")
    return parse_redis_url(raw) if scheme.lower() in REDIS_SCHEMES else raw


#: the schemes of a URL, the ledger's or the broker's, whose query may hold the credentials
#: redis-py reads there (``?password=``, ``?username=``)
CREDENTIAL_SCHEMES = frozenset({"redis", "rediss", "sentinel"})
CREDENTIALS = ("username", "password")


def credentials_in_userinfo(url: str) -> str:
    """A Redis URL (``;``-separated URLs each) with the ``username`` and ``password`` of its query
    moved into its userinfo. redis-py reads both places, the userinfo first; kombu (Celery's
    broker) reads only the userinfo and fails on a ``?password=`` (a second ``password``
    argument: a ``TypeError``), and the masking (``worker.base.masking``) keeps a userinfo's
    user name. One form then for every client: the ledger's, the broker's, the Sentinel
    master's. A userinfo's own user or password wins, as in redis-py; an empty value in the
    query is none (redis-py's ``parse_qs`` drops it). Any other URL is returned as it is."""
    return ";".join(_moved(part) for part in url.split(";"))


def _moved(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in CREDENTIAL_SCHEMES or not parts.query:
        return url
    kept: list[str] = []
    found: dict[str, str] = {}
    for pair in parts.query.split("&"):
        key, _, value = pair.partition("=")
        if unquote_plus(key) not in CREDENTIALS:
            kept.append(pair)
        elif value and unquote_plus(key) not in found:  # the first, as redis-py takes it
            found[unquote_plus(key)] = quote(unquote_plus(value), safe="")
    if len(kept) == len(parts.query.split("&")):
        return url
    userinfo, _, host = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    user = user or found.get("username", "")
    password = password or found.get("password", "")
    at = f"{user}:{password}@" if password else f"{user}@" if user else ""
    return urlunsplit(parts._replace(netloc=at + host, query="&".join(kept)))


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


#: ``N/s``, ``N/m`` or ``N/h``
RATE = re.compile(r"([1-9][0-9]{0,8})/([smh])")
PER_S = {"s": 1.0, "m": 60.0, "h": 3600.0}


def parse_rate(raw: str) -> float:
    """DRES_TENANT_RATE as the seconds between two starts (0.0: unset, no limit). Starts are
    spaced evenly, as Celery's own ``rate_limit`` spaces tasks: ``6/m`` is one every 10 s."""
    if not raw:
        return 0.0
    found = RATE.fullmatch(raw.strip())
    if found is None:
        raise ValueError(f"must be N/s, N/m or N/h with N a whole number from 1 (got '{raw}')")
    return PER_S[found.group(2)] / int(found.group(1))


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
