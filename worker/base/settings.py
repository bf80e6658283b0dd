"""The one typed settings object, and the only reader of the environment (CONTRACT §3)."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, Literal
from urllib.parse import parse_qs, urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError
from pydantic_settings import BaseSettings, SettingsConfigDict
from redis.connection import parse_url

from ledger.durability import Durability, Level
from worker.base.errors import ConfigError
from worker.base.tool_sources import (
    McpServer,
    OpenApi,
    parse_entries,
    parse_mcp_servers,
    parse_openapi,
)

DEMO_TOOLS = "worker.dev.demo_tools"


class AgentApp(BaseModel):
    """One dres app ``call_agent`` may delegate to (an entry of DRES_AGENTS)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    #: the app's API base URL, ``http://`` or ``https://``
    url: str = Field(pattern=r"^https?://[^/\s]+")
    #: its DRES_API_TOKEN (sent as a bearer token); empty: none
    token: str = ""


def parse_sentinels(raw: str) -> list[tuple[str, int]]:
    """DRES_REDIS_SENTINELS's ``(host, port)`` pairs; a ``ValueError`` naming what is wrong."""
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


def parse_agents(raw: str) -> dict[str, AgentApp]:
    """DRES_AGENTS's apps by name; a ``ValueError`` naming what is wrong."""
    shape = '{"NAME": {"url": "http://…", "token": "…"}}'
    return parse_entries(raw, AgentApp, "app", shape)


#: a tool's name as DRES_APPROVAL lists it
NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")
HTTP_URL = re.compile(r"^https?://[^/\s]+\S*$")


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="DRES_", extra="ignore", frozen=True)

    redis_url: str = "redis://127.0.0.1:6379/0"
    #: empty: the ledger Redis
    broker_url: str = ""
    #: comma-separated modules whose ``@tool`` functions are registered
    tools: str = DEMO_TOOLS
    #: default model spec; empty: the scripted demo script
    model: str = ""
    #: seconds: foreground chunk soft / hard time limits
    soft_limit_s: float = Field(60.0, gt=0)
    hard_limit_s: float = Field(90.0, gt=0)
    #: seconds: background chunk soft / hard time limits
    bg_soft_limit_s: float = Field(600.0, gt=0)
    bg_hard_limit_s: float = Field(660.0, gt=0)
    max_auto_continue: int = Field(3, ge=0)
    max_chunks: int = Field(50, ge=1)
    api_token: str | None = None
    #: seconds a finished turn's keys are kept
    finished_ttl_s: int = Field(7 * 24 * 3600, gt=0)
    #: model calls one turn may make before it stops (a runaway loop guard)
    max_model_calls: int = Field(100, ge=1)
    #: resumes of one run after resumable transport errors before the turn stops
    max_transport_resumes: int = Field(3, ge=0)
    #: seconds: cooldown before the one background resume after a provider rate limit
    rate_limit_cooldown_s: float = Field(20.0, ge=0)
    #: attempts to read the journal for the hard-block before a resumed run stops
    journal_read_attempts: int = Field(3, ge=1)
    #: seconds: backoff before each journal re-read
    journal_read_backoff_s: float = Field(0.25, ge=0)
    #: include the journal note in resume prompts (layer 1); the hard-block is always on
    journal_note: bool = True
    #: seconds a run's lease holds without a heartbeat; a live run renews it every third of
    #: that, whatever its chunk's time limits, so a dead worker's turn is taken over soon after
    lease_s: float = Field(8.0, gt=0)
    #: takeovers of dead runs in a row without a newly completed tool call before the turn
    #: stops (``no_progress``, Continue available)
    max_takeovers: int = Field(3, ge=1)
    #: seconds a recorded successor may wait unclaimed before the reaper re-dispatches it
    handoff_grace_s: float = Field(15.0, gt=0)
    #: re-dispatches of one lost handoff before the reaper stops the turn (loudly)
    max_redispatches: int = Field(3, ge=0)
    #: seconds every ledger operation rides out an unreachable Redis (a restart, a failover)
    #: before the run gives up and stops cleanly (CONTRACT §7.13); the API never waits it out
    store_outage_s: float = Field(30.0, ge=0)
    #: what confirms a write tool's ``tool_start`` before its effect runs, and its ``tool_done``
    #: before the turn goes on (CONTRACT §7.13): ``ack`` (Redis's answer, nothing more),
    #: ``replica`` (``WAIT 1``), ``fsync`` (``WAITAOF 1 0``: the primary's AOF on disk),
    #: ``replica+fsync`` (``WAITAOF 1 1``); anything but ``ack`` is checked against the server
    #: at worker start
    durability: Level = "ack"
    #: seconds one such confirmation may wait for the replica or the fsync
    durability_timeout_s: float = Field(1.0, gt=0)
    #: seconds between reaper sweeps on each worker
    reaper_interval_s: float = Field(2.0, gt=0)
    #: seconds an unacknowledged message stays invisible before Redis redelivers it; must exceed
    #: every hard limit (0: twice the longest hard limit)
    visibility_timeout_s: float = Field(0.0, ge=0)
    #: seconds between checks of the Stop flag while the model is waiting or streaming
    cancel_poll_s: float = Field(0.2, gt=0)
    #: milliseconds a streamed text delta may wait to be written with the ones after it (one
    #: ``text`` event per window, not per delta); 0: every delta is its own event
    text_flush_ms: int = Field(50, ge=0)
    #: characters of buffered streamed text written at once, whatever the window
    text_flush_chars: int = Field(512, ge=1)
    #: arm the chaos runner's failpoints (worker.base.failpoints); never in production
    failpoints: bool = False
    #: resume naively: no journal note, no hard-block, no interrupted-write guard. Only for
    #: ``make chaos NAIVE=1``, which counts the duplicate effects dres prevents; never in production
    naive: bool = False
    #: characters of a conversation's earlier turns (messages and answers) a new turn's model
    #: sees, the oldest dropped first (CONTRACT §7.10); 0: none
    history_chars: int = Field(24_000, ge=0)
    #: comma-separated model specs an API client may ask for besides the default
    #: (``anthropic:*`` allows a provider's every model; CONTRACT §3)
    models: str = ""
    #: JSON object of the apps ``call_agent`` may delegate to:
    #: ``{"NAME": {"url": "http://…", "token": "…"}}`` (CONTRACT §7.9)
    agents: str = "{}"
    #: JSON object of MCP servers whose tools are registered: ``{"NAME": {"command": [...],
    #: "env": {}}}`` (stdio) or ``{"NAME": {"url": "http://…/mcp", "headers": {}}}`` (CONTRACT §4)
    mcp_servers: str = "{}"
    #: JSON object of HTTP APIs whose OpenAPI operations are registered:
    #: ``{"NAME": {"spec": "URL or path", "base_url": "…", "operations": [...]}}`` (CONTRACT §4)
    openapi: str = "{}"
    #: the ledger's Redis (``redis_url``) is a Redis Cluster; the broker is then a plain Redis
    redis_cluster: bool = False
    #: ``host:port,host:port`` of Redis Sentinels: the ledger, the broker and the result backend
    #: use the master they name ``redis_master`` and follow its failovers; empty: no Sentinel
    redis_sentinels: str = ""
    #: the master's name the Sentinels monitor (``sentinel monitor NAME ...``)
    redis_master: str = ""
    #: the Sentinels' own password (their ``requirepass``), if they have one; the master's comes
    #: from ``redis_url``'s userinfo, as its database does (its host is not used then), and a
    #: ``rediss://`` ``redis_url`` means TLS to the master and to the Sentinels
    #: (``sentinel_tls``)
    redis_sentinel_password: str = ""
    #: start even when a Redis's ``maxmemory-policy`` is not ``noeviction`` (a warning instead)
    allow_eviction: bool = False
    #: a worker serves Prometheus metrics on this port (all its pool processes together)
    metrics_port: int | None = Field(None, ge=1, le=65535)
    #: ``console`` (for a person) or ``json`` (one object per line)
    log_format: Literal["console", "json"] = "console"
    #: comma-separated modules of extra Celery tasks the dres worker should also run
    celery_include: str = ""
    foreground_queue: str = "dres.foreground"
    background_queue: str = "dres.background"
    #: which write calls wait for a person's decision (CONTRACT §7.14): ``none``, ``writes``
    #: (every write tool) or comma-separated tool names; a tool's ``needs_approval`` adds to it
    approval: str = "none"
    #: seconds an approval request waits for a decision before the turn stops
    #: (``approval_expired``; Continue asks again)
    approval_ttl_s: float = Field(86400.0, gt=0)
    #: a URL each approval request is POSTed to as JSON, best-effort (a person is told)
    approval_webhook: str = ""
    #: the API's public base URL (``https://dres.example.com``): the turn's URL in an approval
    #: webhook's body is made from it; empty: the URL is the path alone
    public_url: str = ""

    @field_validator("agents")
    @classmethod
    def _agents_parse(cls, raw: str) -> str:
        try:
            parse_agents(raw)
        except ValueError as e:
            raise PydanticCustomError("dres_agents", str(e)) from None
        return raw

    @field_validator("mcp_servers")
    @classmethod
    def _mcp_servers_parse(cls, raw: str) -> str:
        try:
            parse_mcp_servers(raw)
        except ValueError as e:
            raise PydanticCustomError("dres_mcp_servers", str(e)) from None
        return raw

    @field_validator("openapi")
    @classmethod
    def _openapi_parse(cls, raw: str) -> str:
        try:
            parse_openapi(raw)
        except ValueError as e:
            raise PydanticCustomError("dres_openapi", str(e)) from None
        return raw

    @field_validator("approval")
    @classmethod
    def _approval_parse(cls, raw: str) -> str:
        names = [name.strip() for name in raw.split(",")]
        if not all(NAME.match(name) for name in names):
            raise PydanticCustomError(
                "dres_approval",
                "must be none, writes, or comma-separated tool names (got '{raw}')",
                {"raw": raw},
            )
        return raw

    @field_validator("approval_webhook", "public_url")
    @classmethod
    def _an_http_url(cls, raw: str) -> str:
        if raw and not HTTP_URL.match(raw):
            raise PydanticCustomError(
                "dres_url", "must be an http:// or https:// URL (got '{raw}')", {"raw": raw}
            )
        return raw

    @field_validator("redis_sentinels")
    @classmethod
    def _sentinels_parse(cls, raw: str) -> str:
        try:
            parse_sentinels(raw)
        except ValueError as e:
            raise PydanticCustomError("dres_sentinels", str(e)) from None
        return raw

    @model_validator(mode="after")
    def _limits_in_order(self) -> Settings:
        if self.hard_limit_s <= self.soft_limit_s:
            raise ValueError("DRES_HARD_LIMIT_S must be greater than DRES_SOFT_LIMIT_S")
        if self.bg_hard_limit_s <= self.bg_soft_limit_s:
            raise ValueError("DRES_BG_HARD_LIMIT_S must be greater than DRES_BG_SOFT_LIMIT_S")
        if self.visibility_timeout_s and self.visibility_timeout_s <= self.longest_hard_limit_s:
            raise ValueError(
                "DRES_VISIBILITY_TIMEOUT_S must exceed every hard limit, or a running chunk "
                "is delivered again to another worker"
            )
        return self

    @model_validator(mode="after")
    def _cluster_has_a_broker(self) -> Settings:
        if self.redis_cluster and not self.broker_url:
            raise ValueError(
                "DRES_BROKER_URL must be set when DRES_REDIS_CLUSTER=1: "
                "Celery's broker is a plain Redis, never the ledger's cluster"
            )
        return self

    @model_validator(mode="after")
    def _sentinels_name_a_master(self) -> Settings:
        if bool(self.sentinels) != bool(self.redis_master.strip()):
            raise ValueError(
                "DRES_REDIS_SENTINELS and DRES_REDIS_MASTER go together: set both (the "
                "Sentinels' host:port list and the master's name they monitor) or neither"
            )
        if self.sentinels and self.redis_cluster:
            raise ValueError(
                "DRES_REDIS_SENTINELS cannot be used with DRES_REDIS_CLUSTER=1: a Redis Cluster "
                "fails its masters over itself"
            )
        if self.sentinels:
            try:
                parse_sentinel_tls(self.redis_url)
            except ValueError as e:
                raise ValueError(f"DRES_REDIS_URL: {e}") from None
        if urlsplit(self.broker_url).scheme == "sentinel" and not self.redis_master.strip():
            raise ValueError("a sentinel:// DRES_BROKER_URL needs DRES_REDIS_MASTER")
        return self

    @property
    def sentinels(self) -> list[tuple[str, int]]:
        """DRES_REDIS_SENTINELS's ``(host, port)`` pairs (validated); empty: no Sentinel."""
        return parse_sentinels(self.redis_sentinels)

    @property
    def sentinel_tls(self) -> dict[str, Any]:
        """With DRES_REDIS_SENTINELS and a ``rediss://`` DRES_REDIS_URL, the TLS options of
        every connection to the master and to the Sentinels (``ssl=True`` and the URL's
        ``ssl_*`` options, redis-py's keyword arguments); else empty: no TLS."""
        return parse_sentinel_tls(self.redis_url) if self.sentinels else {}

    @property
    def longest_hard_limit_s(self) -> float:
        return max(self.hard_limit_s, self.bg_hard_limit_s)

    @property
    def visibility_timeout(self) -> float:
        return self.visibility_timeout_s or 2 * self.longest_hard_limit_s

    def limits(self, mode: str) -> tuple[float, float]:
        """(soft, hard) time limits in seconds of a chunk of a ``mode`` turn."""
        if mode == "background":
            return self.bg_soft_limit_s, self.bg_hard_limit_s
        return self.soft_limit_s, self.hard_limit_s

    def queue(self, mode: str) -> str:
        return self.background_queue if mode == "background" else self.foreground_queue

    @property
    def heartbeat_s(self) -> float:
        """Seconds between a running run's lease renewals: three chances before it runs out."""
        return self.lease_s / 3

    @property
    def write_durability(self) -> Durability:
        """``DRES_DURABILITY`` and ``DRES_DURABILITY_TIMEOUT_S`` as one value."""
        return Durability(self.durability, self.durability_timeout_s)

    @property
    def broker(self) -> str:
        """Celery's broker URL: DRES_BROKER_URL; else the ledger's Redis, through its Sentinels
        when they are set (``sentinel://h1:p1/0;sentinel://h2:p2/0``, the master's password and
        database from DRES_REDIS_URL, its name a transport option: ``create_app``)."""
        if self.broker_url:
            return self.broker_url
        if self.sentinels:
            url = urlsplit(self.redis_url)
            userinfo = url.netloc.rpartition("@")[0]
            at = f"{userinfo}@" if userinfo else ""
            path = url.path if url.path not in {"", "/"} else "/0"
            return ";".join(f"sentinel://{at}{host}:{port}{path}" for host, port in self.sentinels)
        return self.redis_url

    @property
    def tool_modules(self) -> list[str]:
        return [name.strip() for name in self.tools.split(",") if name.strip()]

    @property
    def approval_rule(self) -> tuple[bool, frozenset[str]]:
        """DRES_APPROVAL as (every write waits, the tool names that wait)."""
        names = {name.strip() for name in self.approval.split(",") if name.strip()}
        if names <= {"none"}:
            return False, frozenset()
        if "writes" in names:
            return True, frozenset(names - {"writes"})
        return False, frozenset(names - {"none"})

    @property
    def agent_apps(self) -> dict[str, AgentApp]:
        """DRES_AGENTS's apps by name (validated when the settings were read)."""
        return parse_agents(self.agents)

    @property
    def mcp_server_entries(self) -> dict[str, McpServer]:
        """DRES_MCP_SERVERS's servers by name (validated when the settings were read)."""
        return parse_mcp_servers(self.mcp_servers)

    @property
    def openapi_entries(self) -> dict[str, OpenApi]:
        """DRES_OPENAPI's APIs by name (validated when the settings were read)."""
        return parse_openapi(self.openapi)


def load_settings(**overrides: object) -> Settings:
    """Read the environment; bad values raise ``ConfigError`` with one line naming the variable."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as e:
        first = e.errors()[0]
        if first["loc"]:
            name = "DRES_" + str(first["loc"][0]).upper()
            raise ConfigError(f"{name}: {first['msg']}") from None
        raise ConfigError(str(first["msg"]).removeprefix("Value error, ")) from None


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return load_settings()
