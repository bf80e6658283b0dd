"""``compose.yaml`` (issue 15): valid against the Compose specification, and what a deployment
of dres needs from it — redis durable and healthy first, workers that scale, an API that has its
token from the environment, Flower only when asked for."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from compose_support import COMPOSE, HA_VARIABLES, MissingVariable, interpolate, load, service

#: the services every `docker compose up` starts, each with a healthcheck
SERVICES = ("redis", "worker", "api")
#: seconds Docker waits after SIGTERM by default before SIGKILL
DOCKER_DEFAULT_GRACE_S = 10


def check_jsonschema() -> str:
    """The installed ``check-jsonschema`` CLI, beside this interpreter (the dev extra)."""
    beside = Path(sys.executable).parent / "check-jsonschema"
    found = str(beside) if beside.exists() else shutil.which("check-jsonschema")
    assert found, "check-jsonschema is not installed: make install"
    return found


def validate(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [check_jsonschema(), "--builtin-schema", "vendor.compose-spec", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def seconds(duration: str) -> float:
    """A Compose duration such as ``1m30s`` or ``45s``, in seconds."""
    units = {"h": 3600, "m": 60, "s": 1, "ms": 0.001}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|h|m|s)", duration)
    assert parts and "".join(n + u for n, u in parts) == duration, f"not a duration: {duration}"
    return sum(float(n) * units[u] for n, u in parts)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return load()


def test_compose_yaml_is_valid_against_the_compose_specification() -> None:
    done = validate(COMPOSE)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_compose_file_that_breaks_the_specification_is_refused(tmp_path: Path) -> None:
    """The schema check can fail: a misspelt key in a copy of compose.yaml is caught."""
    broken = tmp_path / "compose.yaml"
    broken.write_text(COMPOSE.read_text().replace("healthcheck:", "healthchek:", 1))
    done = validate(broken)
    assert done.returncode != 0
    assert "healthchek" in done.stdout + done.stderr


#: the shell's (or .env's) variables compose.yaml requires
SECRETS = {"DRES_API_TOKEN": "t0ken", "REDIS_PASSWORD": "pw"}


def test_redis_7_keeps_an_append_only_file_synced_every_second_on_a_named_volume(
    compose: dict[str, Any],
) -> None:
    redis = compose["services"]["redis"]
    assert re.fullmatch(r"redis:7\.\d+\.\d+(-\w+)?", redis["image"]), redis["image"]
    command = service("redis", SECRETS).command
    assert command[0] == "redis-server"
    options = dict(zip(command[1::2], command[2::2], strict=True))
    assert options == {
        "--appendonly": "yes",
        "--appendfsync": "everysec",
        "--replica-announce-ip": "redis",  # its name, should the ha profile demote it
        "--requirepass": "pw",
        "--masterauth": "pw",  # should the ha profile demote it, its new master wants it too
    }
    volume, _, target = redis["volumes"][0].partition(":")
    assert volume in compose["volumes"] and target == "/data"


#: the ha profile's services
HA = ("redis-replica", "sentinel-1", "sentinel-2", "sentinel-3")


def sentinel_conf(compose: dict[str, Any]) -> list[str]:
    return str(compose["configs"]["sentinel-conf"]["content"]).splitlines()


def test_the_ha_profile_adds_a_durable_replica_of_redis_and_three_sentinels(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    assert [n for n, s in services.items() if s.get("profiles") == ["ha"]] == list(HA)
    replica = services["redis-replica"]["command"]
    at = replica.index("--replicaof")
    assert replica[at + 1 : at + 3] == ["redis", "6379"]
    rest = replica[1:at] + replica[at + 3 :]
    options = dict(zip(rest[::2], rest[1::2], strict=True))
    assert {k: interpolate(v, SECRETS) for k, v in options.items()} == {
        "--appendonly": "yes",
        "--appendfsync": "everysec",
        "--replica-announce-ip": "redis-replica",
        "--requirepass": "pw",
        "--masterauth": "pw",
    }
    for name in HA:
        assert services[name]["healthcheck"]["test"][0] == "CMD", name
        assert services[name]["depends_on"] == {"redis": {"condition": "service_healthy"}}


def test_each_sentinel_keeps_its_own_writable_copy_of_the_sentinel_conf(
    compose: dict[str, Any],
) -> None:
    """A Sentinel rewrites its config file: a shared or read-only one would not do."""
    volumes = []
    for name in HA[1:]:
        sentinel = compose["services"][name]
        [config] = sentinel["configs"]
        assert config["source"] == "sentinel-conf"
        script = sentinel["command"][-1]
        assert f"cp {config['target']} /data/sentinel.conf" in script
        assert "redis-server /data/sentinel.conf --sentinel" in script
        volume, _, target = sentinel["volumes"][0].partition(":")
        assert target == "/data" and volume in compose["volumes"]
        volumes.append(volume)
    assert len(set(volumes)) == 3, "one volume each"


def test_the_sentinels_monitor_redis_as_the_master_dres_is_told_of(
    compose: dict[str, Any],
) -> None:
    conf = sentinel_conf(compose)
    assert "port 26379" in conf
    [monitor] = [line.split() for line in conf if line.startswith("sentinel monitor ")]
    name, host, port, quorum = monitor[2:]
    assert (name, host, port) == (HA_VARIABLES["DRES_REDIS_MASTER"], "redis", "6379")
    assert 1 < int(quorum) <= len(HA) - 1, "a majority of the three sentinels"
    assert "sentinel resolve-hostnames yes" in conf
    [auth] = [interpolate(line, SECRETS) for line in conf if line.startswith("sentinel auth-pass")]
    assert auth == "sentinel auth-pass dres pw"
    header = COMPOSE.read_text()
    assert all(f"{name}={value}" in header for name, value in HA_VARIABLES.items())
    listed = HA_VARIABLES["DRES_REDIS_SENTINELS"].split(",")
    assert [entry.split(":")[0] for entry in listed] == list(HA[1:])
    for name in ("worker", "api"):
        env = service(name, {**SECRETS, **HA_VARIABLES}).environment
        assert {k: env[k] for k in HA_VARIABLES} == HA_VARIABLES, name
        plain = service(name, SECRETS).environment
        assert plain["DRES_REDIS_SENTINELS"] == plain["DRES_REDIS_MASTER"] == "", name


def test_every_service_has_a_healthcheck_and_dres_waits_for_a_healthy_redis(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    for name in SERVICES:
        assert services[name]["healthcheck"]["test"][0] in {"CMD", "CMD-SHELL"}, name
    assert services["redis"]["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"]
    # redis-cli reads the password from its own variable: none on its command line
    assert service("redis", SECRETS).environment == {"REDISCLI_AUTH": "pw"}
    for name in ("worker", "api", "flower"):
        assert services[name]["depends_on"] == {"redis": {"condition": "service_healthy"}}, name


def test_the_worker_scales_no_container_name_and_no_host_port(compose: dict[str, Any]) -> None:
    """`docker compose up --scale worker=3` needs workers that can run side by side."""
    worker = compose["services"]["worker"]
    assert "container_name" not in worker
    assert "ports" not in worker
    assert worker["command"][0] == "worker"


def test_the_worker_gives_a_hand_over_more_time_than_dockers_default_before_sigkill(
    compose: dict[str, Any],
) -> None:
    worker = compose["services"]["worker"]
    assert worker.get("stop_signal", "SIGTERM") == "SIGTERM"
    assert seconds(worker["stop_grace_period"]) > DOCKER_DEFAULT_GRACE_S


def test_the_worker_serves_its_metrics_on_an_exposed_port_of_the_compose_network(
    compose: dict[str, Any],
) -> None:
    """Its container's every interface (a Prometheus on the compose network scrapes it), and
    no port of the host's."""
    worker = service("worker", SECRETS)
    port = worker.environment["DRES_METRICS_PORT"]
    assert port in [str(p) for p in worker.raw["expose"]]
    assert worker.environment["DRES_METRICS_HOST"] == "0.0.0.0"


def test_the_api_wants_its_token_from_the_env_file_and_is_published_on_loopback_only() -> None:
    with pytest.raises(MissingVariable, match=r"DRES_API_TOKEN: set DRES_API_TOKEN in \.env"):
        service("api", {"REDIS_PASSWORD": "pw"})
    api = service("api", SECRETS)
    assert api.command == ["api", "--host", "0.0.0.0", "--port", "8000"]
    assert api.environment["DRES_API_TOKEN"] == "t0ken"
    assert api.raw["ports"] == ["127.0.0.1:${DRES_API_PORT:-8000}:8000"]
    assert "/healthz" in " ".join(api.healthcheck)
    assert "reverse proxy that terminates TLS" in COMPOSE.read_text()


def test_every_service_wants_the_redis_password_and_the_urls_carry_it() -> None:
    for name in ("redis", "worker", "api"):
        with pytest.raises(MissingVariable, match=r"REDIS_PASSWORD: set REDIS_PASSWORD in \.env"):
            service(name, {"DRES_API_TOKEN": "t0ken"})
    for name in ("worker", "api"):
        url = service(name, SECRETS).environment["DRES_REDIS_URL"]
        assert url == "redis://:pw@redis:6379/0", name
    flower = service("flower", SECRETS)
    assert "--broker=redis://:pw@redis:6379/0" in flower.command


def test_the_env_example_names_every_secret_compose_requires_and_gives_none() -> None:
    example = (COMPOSE.parent / ".env.example").read_text()
    lines = [line for line in example.splitlines() if line and not line.startswith("#")]
    assert lines == [f"{name}=" for name in ("REDIS_PASSWORD", "DRES_API_TOKEN")]
    required = set(re.findall(r"\$\{([A-Z_]+):\?", COMPOSE.read_text()))
    assert required == {"REDIS_PASSWORD", "DRES_API_TOKEN"}
    assert ".env.example" in (COMPOSE.parent / "README.md").read_text()
    assert "/.env" in (COMPOSE.parent / ".gitignore").read_text().splitlines()


def test_flower_runs_only_under_its_profile_and_only_on_the_hosts_loopback(
    compose: dict[str, Any],
) -> None:
    flower = compose["services"]["flower"]
    assert flower["profiles"] == ["flower"]
    assert all(port.startswith("127.0.0.1:") for port in flower["ports"])
    for name in SERVICES:
        assert "profiles" not in compose["services"][name], name


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("${A:-x}", "x"),
        ("${B:-x}", "x"),
        ("${B-x}", ""),
        ("${C:-x}", "c"),
        ("$C/${C}", "c/c"),
        ("$$HOME", "$HOME"),
        ("${C:?needed}", "c"),
    ],
)
def test_the_tests_interpolate_variables_as_compose_does(text: str, expected: str) -> None:
    assert interpolate(text, {"B": "", "C": "c"}) == expected


def test_a_required_variable_that_is_empty_or_missing_is_refused() -> None:
    for variables in ({}, {"A": ""}):
        with pytest.raises(MissingVariable, match="A: say so"):
            interpolate("${A:?say so}", variables)
