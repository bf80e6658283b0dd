"""The one masking of secrets (docs/security.md, ``worker.base.masking``): a URL's password, user
name alone, query values and fragment; the URLs inside a message; a command line's arguments; a
mapping's values. And a Redis URL's ``?password=`` moved into its userinfo, where kombu reads it
too (``worker.base.parsers.credentials_in_userinfo``)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rigs import ROOT
from worker.base.masking import MASK, mask_command, mask_text, mask_url, mask_values
from worker.base.parsers import credentials_in_userinfo
from worker.base.tool_sources import McpServer

M = MASK


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        # nothing secret: as it is
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("https://api.example/v1/openapi.json", "https://api.example/v1/openapi.json"),
        ("/etc/dres/openapi.yaml", "/etc/dres/openapi.yaml"),
        ("", ""),
        # userinfo: the password, and a user name alone (often the token itself)
        ("redis://app:pw-1@h:6380/2", f"redis://app:{M}@h:6380/2"),
        ("redis://:pw-1@h/0", f"redis://:{M}@h/0"),
        ("https://ghp_TOKEN@github.com/o/r", f"https://{M}@github.com/o/r"),
        ("http://u:p%40ss@[::1]:8080/mcp", f"http://u:{M}@[::1]:8080/mcp"),
        # the query: every value but a Redis option's, the keys kept
        ("http://h/mcp?token=T1", f"http://h/mcp?token={M}"),
        (
            "http://h/s.json?API_KEY=T1&sig=T2&code=T3",
            f"http://h/s.json?API_KEY={M}&sig={M}&code={M}",
        ),
        (
            "http://h/x?access_token=T1&x-amz-credential=T2",
            f"http://h/x?access_token={M}&x-amz-credential={M}",
        ),
        ("http://h/x?T1", f"http://h/x?{M}"),
        ("http://h/x?empty=&token=T1", f"http://h/x?empty=&token={M}"),
        ("redis://h/0?password=T1&db=2", f"redis://h/0?password={M}&db=2"),
        (
            "rediss://:T1@h/0?ssl_cert_reqs=none&ssl_ca_certs=/ca.pem",
            f"rediss://:{M}@h/0?ssl_cert_reqs=none&ssl_ca_certs=/ca.pem",
        ),
        # the fragment
        ("http://h/#token=T1", f"http://h/#{M}"),
        # no scheme, a password in its userinfo
        ("app:T1@h:6379", f"{M}@h:6379"),
        # cannot be parsed: masked whole
        ("http://u:T1@[::1/x", M),
    ],
)
def test_a_url_keeps_where_it_points_and_none_of_its_secrets(url: str, shown: str) -> None:
    assert mask_url(url) == shown


def test_with_path_a_webhook_url_keeps_only_its_scheme_host_and_user() -> None:
    url = "https://hook:T1@hooks.example/services/T2?key=T3#T4"
    assert mask_url(url, path=True) == f"https://hook:{M}@hooks.example/{M}?{M}#{M}"
    assert mask_url("https://hooks.example/", path=True) == "https://hooks.example/"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("no url here: token=T1", "no url here: token=T1"),
        (
            "Client error '401 Unauthorized' for url 'http://u:T1@h:9/mcp?token=T2'",
            f"Client error '401 Unauthorized' for url 'http://u:{M}@h:9/mcp?token={M}'",
        ),
        ("cannot read (http://h/s?key=T1).", f"cannot read (http://h/s?key={M})."),
        (
            "sentinel://:T1@a:1/0;sentinel://:T1@b:2/0 down",
            f"sentinel://:{M}@a:1/0;sentinel://:{M}@b:2/0 down",
        ),
        ("two: redis://:T1@h/0 and http://h/?t=T2", f"two: redis://:{M}@h/0 and http://h/?t={M}"),
    ],
)
def test_every_url_in_a_message_is_masked(text: str, shown: str) -> None:
    assert mask_text(text) == shown


@pytest.mark.parametrize(
    ("command", "shown"),
    [
        (["npx", "-y", "@mcp/server-x", "--api-key", "sk-T1"], ["npx", M, M, M, M]),
        (["server", "--token=T1"], ["server", M]),
        (["server-postgres", "postgresql://u:T1@db/app"], ["server-postgres", M]),
        (["/usr/bin/server"], ["/usr/bin/server"]),
        ([], []),
    ],
)
def test_a_command_line_shows_its_program_and_masks_every_argument(
    command: list[str], shown: list[str]
) -> None:
    assert mask_command(command) == shown


def test_a_mapping_keeps_its_keys_and_masks_every_value() -> None:
    assert mask_values({"Authorization": "Bearer T1", "X-Id": "T2"}) == {
        "Authorization": M,
        "X-Id": M,
    }


def test_an_mcp_server_is_named_in_messages_with_its_secrets_masked() -> None:
    by_url = McpServer(url="http://u:T1@h:9/mcp?token=T2")
    assert by_url.where == f"http://u:{M}@h:9/mcp?token={M}"
    by_command = McpServer(command=("prog", "--api-key", "T1"), env={"K": "T2"})
    assert by_command.where == f"prog {M} {M}"


#: a process that logs through dres's logging, a dres line and a library's (the standard
#: library's, as Celery's and kombu's are), each naming a URL with secrets
LOGS = """
import logging, sys, structlog
from worker.base.logging import configure_logging
configure_logging(json=sys.argv[1] == "json")
structlog.get_logger("dres.test").warning(
    "failed http://h/x?token=SEKRET1", error="ConnectError: redis://:SEKRET2@h/0", tools=["a"]
)
logging.getLogger("kombu.test").warning("Cannot connect to http://u:SEKRET3@h/?sig=SEKRET4")
"""


@pytest.mark.parametrize("form", ["console", "json"])
def test_a_log_line_names_no_secret_of_a_url_in_its_fields(form: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", LOGS, form], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    printed = done.stderr
    assert done.returncode == 0 and printed.count("\n") == 2, printed
    assert "token=****" in printed and "redis://:****@h/0" in printed, printed
    assert "u:****@h/?sig=****" in printed, printed
    assert "SEKRET" not in printed, printed


@pytest.mark.parametrize(
    ("url", "moved"),
    [
        ("redis://h:6379/0?password=T1", "redis://:T1@h:6379/0"),
        ("redis://h/0?username=app&password=p%40ss&db=2", "redis://app:p%40ss@h/0?db=2"),
        ("rediss://h/0?ssl_cert_reqs=none&password=a+b", "rediss://:a%20b@h/0?ssl_cert_reqs=none"),
        # the userinfo's own wins, as in redis-py; an empty one in the query is none
        ("redis://:own@h/0?password=T1", "redis://:own@h/0"),
        ("redis://app@h/0?password=T1", "redis://app:T1@h/0"),
        ("redis://h/0?password=&db=1", "redis://h/0?db=1"),
        ("redis://h/0?password=&password=T1", "redis://:T1@h/0"),
        # a Sentinel broker's URLs, each
        ("sentinel://a:1/0?password=T1;sentinel://b:2/0", "sentinel://:T1@a:1/0;sentinel://b:2/0"),
        # anything else as it is
        ("redis://:pw@h/0?db=1", "redis://:pw@h/0?db=1"),
        ("unix:///tmp/redis.sock?password=T1", "unix:///tmp/redis.sock?password=T1"),
        ("", ""),
    ],
)
def test_a_redis_url_s_query_credentials_move_into_its_userinfo(url: str, moved: str) -> None:
    assert credentials_in_userinfo(url) == moved
