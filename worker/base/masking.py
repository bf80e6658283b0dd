"""What a secret looks like where a person reads it (docs/security.md): ``dres config``, the
start-up errors of every command and tool source, ``dres up``'s banner, and every log line
(``worker.base.logging`` runs ``mask_text`` over each). One rule for each form a secret takes:

- a URL (``mask_url``): its userinfo's password (a user name alone, often a token itself, is
  masked too; beside a password it is kept), every query value but those of ``PLAIN_KEYS``
  (their keys are kept), and its fragment; with ``path``, its path too (a webhook's URL is often
  its only credential: Slack's carries its key in the path). Every query value, not those whose
  key names a secret: no list of names knows every API's (``?code=``, ``?sig=``, ``?k=``,
  ``?hapikey=``), so the list is of the keys known to be no secret, and an unknown one is masked.
- text that may hold URLs, an exception's message (``mask_text``): each URL in it, as above.
- a command line (``mask_command``): the program, then every argument masked. Not only the
  values after ``--api-key`` or ``--token=``: a secret is as often positional (``server-postgres
  postgresql://user:pw@db/app``, ``server-slack xoxb-…``) or follows a flag no list names, and a
  value may itself start with ``-``; the server's name and program say which server it is.
- a mapping of header or environment values (``mask_values``): its keys, each value masked.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

MASK = "****"
#: query keys whose values are never secrets (Redis's connection options in a ``redis://`` URL):
#: shown, so that a reader sees the options; any other query value is masked
PLAIN_KEYS = frozenset(
    {
        "db",
        "protocol",
        "client_name",
        "decode_responses",
        "encoding",
        "health_check_interval",
        "max_connections",
        "retry_on_timeout",
        "socket_timeout",
        "socket_connect_timeout",
        "socket_keepalive",
        "ssl_cert_reqs",
        "ssl_check_hostname",
        "ssl_ca_certs",
        "ssl_certfile",
        "ssl_keyfile",
        "ssl_min_version",
    }
)
#: a URL inside text: a scheme and ``://``, up to white space, a quote, a bracket, or a ``;``
#: that starts another URL (a Sentinel broker's ``sentinel://…;sentinel://…``)
URL_IN_TEXT = re.compile(
    r"[A-Za-z][A-Za-z0-9+.-]*://(?:(?!;[A-Za-z][A-Za-z0-9+.-]*://)[^\s'\"<>`])+"
)
#: a URL without its scheme whose userinfo has a password (``user:pw@host:6379``)
SCHEMELESS_USERINFO = re.compile(r"^[^/@\s]*:[^/@\s]*@")


def mask_url(url: str, *, path: bool = False) -> str:
    """``url`` with its secrets masked (the module's rules); with ``path``, its path too (scheme
    and host stay, to say where it points). Text that is no URL is returned as it is, unless it
    looks like one without its scheme whose userinfo has a password; a URL that cannot be parsed
    is masked whole."""
    if "://" not in url:
        return SCHEMELESS_USERINFO.sub(f"{MASK}@", url)
    try:
        parts = urlsplit(url)
    except ValueError:  # an IPv6 host without its closing bracket, ...
        return MASK
    if "@" in parts.netloc:
        userinfo, _, host = parts.netloc.rpartition("@")
        user, colon, _password = userinfo.partition(":")
        kept = f"{user}:{MASK}" if colon and user else f":{MASK}" if colon else MASK
        parts = parts._replace(netloc=f"{kept}@{host}")
    query = parts.query
    if query:
        query = "&".join(_masked_pair(pair) for pair in query.split("&"))
    return urlunsplit(
        parts._replace(
            path=f"/{MASK}" if path and parts.path.strip("/") else parts.path,
            query=MASK if path and query else query,
            fragment=MASK if parts.fragment else "",
        )
    )


def _masked_pair(pair: str) -> str:
    key, eq, value = pair.partition("=")
    if not eq:  # a bare word (``?SECRET``): it may be the token itself
        return MASK if key else key
    if key.lower() in PLAIN_KEYS or not value:
        return pair
    return f"{key}={MASK}"


def mask_text(text: str, *, path: bool = False) -> str:
    """``text`` with every URL in it masked (``mask_url``, with ``path`` for each)."""
    if "://" not in text:
        return text

    def masked(match: re.Match[str]) -> str:
        # punctuation after a URL is the sentence's: ``(http://h/x?token=t).``
        url = match.group(0).rstrip(").,;:!")
        return mask_url(url, path=path) + match.group(0)[len(url) :]

    return URL_IN_TEXT.sub(masked, text)


def mask_command(command: Sequence[str]) -> list[str]:
    """A command line as it may be shown: its program, then each argument masked."""
    if not command:
        return []
    program, *arguments = command
    return [program, *(MASK for _ in arguments)]


def mask_values(mapping: Mapping[str, Any]) -> dict[str, str]:
    """Header or environment values as they may be shown: the keys, each value masked."""
    return {key: MASK for key in mapping}
