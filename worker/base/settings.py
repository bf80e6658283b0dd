"""The one typed settings object: the one reader of the DRES_* settings (docs/configuration.md);
docs/configuration.md lists the few other variables dres reads, and where."""

from __future__ import annotations

import hmac
from collections.abc import Callable
from functools import lru_cache
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError
from pydantic_settings import BaseSettings, SettingsConfigDict

from ledger.durability import Durability, Level
from worker.base.errors import ConfigError
from worker.base.loop_specs import LoopSpec, loop_entries
from worker.base.parsers import (
    check_token,
    credentials_in_userinfo,
    parse_approval,
    parse_approver_tokens,
    parse_broker_url,
    parse_http_url,
    parse_rate,
    parse_redis_url,
    parse_sentinel_tls,
    parse_sentinels,
    parse_webhook_secret,
)
from worker.base.tool_sources import parse_agents, parse_mcp_servers, parse_openapi

#: the demo's tools, the default DRES_TOOLS (docs/configuration.md): an example module written
#: against the public ``worker.tools`` only, beside it at the package's root and on no floor
DEMO_TOOLS = "worker.demo_tools"

#: the settings whose value a parser checks at start, beyond its type: its ``ValueError``
#: becomes one line naming the variable (``load_settings``)
PARSERS: dict[str, Callable[[str], object]] = {
    "redis_url": parse_redis_url,
    "broker_url": parse_broker_url,
    "agents": parse_agents,
    "mcp_servers": parse_mcp_servers,
    "openapi": parse_openapi,
    "approval": parse_approval,
    "approver_tokens": parse_approver_tokens,
    "approval_webhook": parse_http_url,
    "approval_webhook_secret": parse_webhook_secret,
    "public_url": parse_http_url,
    "redis_sentinels": parse_sentinels,
    "tenant_rate": parse_rate,
    "loop": loop_entries,
}


class Settings(BaseSettings):
    """Every ``DRES_*`` setting: its type, its default and one line of meaning (``description``),
    the one source ``dres config`` and the reference's table (docs/configuration.md) show."""

    model_config = SettingsConfigDict(env_prefix="DRES_", extra="ignore", frozen=True)

    redis_url: str = Field("redis://127.0.0.1:6379/0", description="the ledger's Redis")
    broker_url: str = Field("", description="Celery's broker; empty: the ledger's Redis")
    tools: str = Field(
        DEMO_TOOLS, description="comma-separated modules whose @tool functions are registered"
    )
    model: str = Field("", description="the default model spec; empty: the scripted demo script")
    soft_limit_s: float = Field(60.0, gt=0, description="seconds: a foreground chunk's soft limit")
    hard_limit_s: float = Field(90.0, gt=0, description="seconds: a foreground chunk's hard limit")
    bg_soft_limit_s: float = Field(
        600.0, gt=0, description="seconds: a background chunk's soft limit"
    )
    bg_hard_limit_s: float = Field(
        660.0, gt=0, description="seconds: a background chunk's hard limit"
    )
    max_auto_continue: int = Field(
        3, ge=0, description="automatic continuations of one turn's time-limit stops"
    )
    max_chunks: int = Field(
        50, ge=1, description="self-chained chunks of one turn before it stops (max_chunks)"
    )
    api_token: str | None = Field(
        None, description="the bearer token the API requires; unset: none (loopback binds only)"
    )
    approver_tokens: str = Field(
        "{}",
        description='JSON: {"NAME": "TOKEN"}; set: only these tokens decide approvals, as NAME',
    )
    max_streams: int = Field(
        2000,
        ge=1,
        description="live event streams (SSE, chat, AG-UI) one API process serves at once; "
        "one more: 503",
    )
    finished_ttl_s: int = Field(
        7 * 24 * 3600, gt=0, description="seconds a finished turn's keys are kept"
    )
    max_model_calls: int = Field(
        100, ge=1, description="model calls one turn may make before it stops (a runaway guard)"
    )
    max_transport_resumes: int = Field(
        3, ge=0, description="resumes of one run after transport errors before the turn stops"
    )
    rate_limit_cooldown_s: float = Field(
        20.0, ge=0, description="seconds before a background turn's one resume after a 429"
    )
    journal_read_attempts: int = Field(
        3, ge=1, description="reads of the journal for the hard-block before a resumed run stops"
    )
    journal_read_backoff_s: float = Field(
        0.25, ge=0, description="seconds of backoff before each journal re-read"
    )
    journal_note: bool = Field(
        True, description="put the journal note in resume prompts (the hard-block is always on)"
    )
    # A live run renews its lease every third of it, whatever its chunk's time limits, so a dead
    # worker's turn is taken over soon after (within about a lease and a reaper sweep). Three
    # renewals per lease: a heartbeat may be two thirds of a lease late (a tool holding the GIL,
    # a starved host) before its run is taken for dead.
    lease_s: float = Field(
        3.0, gt=0, description="seconds a run's lease holds without a heartbeat (one every third)"
    )
    max_takeovers: int = Field(
        3, ge=1, description="takeovers in a row without progress before a turn stops"
    )
    handoff_grace_s: float = Field(
        15.0, gt=0, description="seconds a successor may wait unclaimed before it is sent again"
    )
    max_redispatches: int = Field(
        3, ge=0, description="re-sends of one lost hand-off before the reaper stops the turn"
    )
    store_outage_s: float = Field(
        30.0, ge=0, description="seconds a worker's ledger writes ride out an unreachable Redis"
    )
    # Anything but ack is checked against the server at worker start.
    durability: Level = Field(
        "ack",
        description="what confirms a write's records: ack, replica, fsync or replica+fsync",
    )
    durability_timeout_s: float = Field(
        1.0, gt=0, description="seconds one such confirmation may wait"
    )
    # Each sweep waits this long +-20 % at random, so that workers started together do not sweep
    # in step.
    reaper_interval_s: float = Field(
        1.0, gt=0, description="seconds between reaper sweeps on each worker (+-20 % at random)"
    )
    # It must exceed every hard limit, or a running chunk is delivered again to another worker.
    visibility_timeout_s: float = Field(
        0.0,
        ge=0,
        description="seconds before Redis redelivers an unacknowledged message; 0: twice the "
        "longest hard limit",
    )
    cancel_poll_s: float = Field(
        0.2, gt=0, description="seconds between looks at the Stop flag while a model answers"
    )
    text_flush_ms: int = Field(
        50,
        ge=0,
        description="milliseconds streamed text may wait to be stored with what follows; 0: none",
    )
    text_flush_chars: int = Field(
        512, ge=1, description="characters of streamed text stored at once, whatever the wait"
    )
    failpoints: bool = Field(
        False, description="arm the chaos runner's failpoints; never in production"
    )
    # Only for ``make chaos NAIVE=1``, which counts the duplicate effects dres prevents.
    naive: bool = Field(
        False,
        description="resume without the note, the hard-block or the guard; never in production",
    )
    double_text: Literal["queue", "interrupt", "reject"] = Field(
        "queue",
        description="what a new message does while its conversation has a live turn: queue, "
        "interrupt or reject",
    )
    tenant_concurrency: int | None = Field(
        None,
        ge=1,
        description="turns of one tenant running or resuming at once, across all workers; unset: "
        "no limit",
    )
    tenant_rate: str = Field(
        "",
        description="N/s, N/m or N/h: turns one tenant may start (evenly spaced); empty: no limit",
    )
    tenant_max_queued: int | None = Field(
        None, ge=1, description="turns one tenant may have queued; one more is refused (429)"
    )
    metrics_tenant_label: bool = Field(
        False, description="per-tenant metrics carry a tenant label (mind the cardinality)"
    )
    history_chars: int = Field(
        24_000, ge=0, description="characters of earlier turns a new turn's model sees; 0: none"
    )
    models: str = Field(
        "", description="comma-separated model specs an API client may ask for (anthropic:*)"
    )
    loop: str = Field(
        "dres",
        description="loops a turn may run (dres, pydantic_ai:MODULE:ATTR, "
        "openai_agents:MODULE:ATTR); first: default",
    )
    agents: str = Field(
        "{}", description='JSON: the apps call_agent may call, {"NAME": {"url", "token"}}'
    )
    mcp_servers: str = Field(
        "{}",
        description='JSON: MCP servers whose tools are registered, {"NAME": {"command" or "url"}}',
    )
    openapi: str = Field(
        "{}",
        description='JSON: HTTP APIs whose OpenAPI operations are tools, {"NAME": {"spec"}}',
    )
    max_result_bytes: int = Field(
        262_144, ge=1024, description="bytes of a tool result (its JSON) stored whole; more: cut"
    )
    turn_token_budget: int | None = Field(
        None, ge=1, description="tokens one turn may spend until a Continue; unset: no budget"
    )
    redis_cluster: bool = Field(
        False, description="the ledger's Redis is a Redis Cluster (the broker a plain Redis)"
    )
    redis_sentinels: str = Field(
        "", description="host:port,host:port of Redis Sentinels; empty: no Sentinel"
    )
    redis_master: str = Field("", description="the name of the master the Sentinels monitor")
    # The master's password and database come from redis_url's userinfo and path (its host is
    # not used then); a rediss:// redis_url means TLS to the master and to the Sentinels.
    redis_sentinel_password: str = Field(
        "", description="the Sentinels' own password (their requirepass), if any"
    )
    allow_eviction: bool = Field(
        False, description="start on a Redis whose maxmemory-policy is not noeviction (warn)"
    )
    metrics_port: int | None = Field(
        None, ge=1, le=65535, description="a worker serves Prometheus metrics on this port"
    )
    metrics_host: str = Field(
        "127.0.0.1", min_length=1, description="the address a worker's metrics port listens on"
    )
    log_format: Literal["console", "json"] = Field(
        "console", description="console (for a person) or json (one object per line)"
    )
    celery_include: str = Field(
        "", description="comma-separated modules of extra Celery tasks the worker also runs"
    )
    foreground_queue: str = Field(
        "dres.foreground", description="the Celery queue of foreground chunks"
    )
    background_queue: str = Field(
        "dres.background", description="the Celery queue of background chunks"
    )
    # A tool's own needs_approval adds to this.
    approval: str = Field(
        "none", description="which writes wait for a person: none, writes or tool names"
    )
    approval_ttl_s: float = Field(
        86400.0, gt=0, description="seconds a request waits before the turn stops (expired)"
    )
    approval_webhook: str = Field(
        "", description="a URL each approval request is POSTed to (JSON), best-effort"
    )
    approval_webhook_secret: str = Field(
        "", description="the Standard Webhooks key (whsec_…) the webhook's POSTs are signed with"
    )
    public_url: str = Field(
        "", description="the API's public base URL, for the turn's URL in a webhook's body"
    )

    @field_validator(*PARSERS)
    @classmethod
    def _parsed(cls, raw: str, info: ValidationInfo) -> str:
        try:
            PARSERS[info.field_name or ""](raw)
        except ValueError as e:
            raise PydanticCustomError("dres_setting", str(e)) from None
        return raw

    @field_validator("redis_url", "broker_url")
    @classmethod
    def _credentials_in_userinfo(cls, raw: str) -> str:
        return credentials_in_userinfo(raw)

    @field_validator("api_token")
    @classmethod
    def _token_long_enough(cls, raw: str | None) -> str | None:
        if not raw:
            return None  # empty is unset, as it always was
        try:
            return check_token(raw)
        except ValueError as e:
            raise PydanticCustomError("dres_setting", str(e)) from None

    @model_validator(mode="after")
    def _approvers_are_not_the_caller(self) -> Settings:
        if self.api_token and self.api_token in self.approvers.values():
            raise ValueError(
                "DRES_APPROVER_TOKENS: an approver's token is DRES_API_TOKEN: the turn's caller "
                "may not approve its own writes"
            )
        return self

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
    def loops(self) -> tuple[LoopSpec, ...]:
        """DRES_LOOP's entries (validated), the first the default."""
        return loop_entries(self.loop)

    @property
    def approvers(self) -> dict[str, str]:
        """DRES_APPROVER_TOKENS as ``{NAME: TOKEN}`` (validated); empty: no approvers."""
        return parse_approver_tokens(self.approver_tokens)

    def approver_named(self, token: str) -> str | None:
        """The NAME of the approver whose token this is, or None (compared in constant time)."""
        found = None
        for name, known in self.approvers.items():
            if hmac.compare_digest(token.encode(), known.encode()):
                found = name
        return found

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
    def tenant_start_interval_s(self) -> float:
        """Seconds between two starts of one tenant's turns (DRES_TENANT_RATE); 0.0: no limit."""
        return parse_rate(self.tenant_rate)

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
    def approval_rule(self) -> tuple[bool, frozenset[str]]:
        """DRES_APPROVAL as (every write waits, the tool names that wait)."""
        return parse_approval(self.approval)


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
