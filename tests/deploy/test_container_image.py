"""The ``Dockerfile`` and ``.dockerignore`` (issue 15): a pinned slim Python, dres installed from
the repo with the provider extras (their versions and hashes from requirements.lock), a non-root
user, ``dres`` as the entry point, and a build context without the virtualenv, git or test
artefacts. No Docker engine runs here: the file is read, and the lock it installs is checked."""

from __future__ import annotations

import fnmatch
import json
import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"


def instructions() -> list[tuple[str, str]]:
    """The Dockerfile's instructions as (KEYWORD, arguments), continuation lines joined."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    found = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            found.append((keyword.upper(), rest.strip()))
    return found


def all_of(keyword: str) -> list[str]:
    return [rest for k, rest in instructions() if k == keyword]


def ignored(path: str) -> bool:
    """Whether ``.dockerignore`` keeps ``path`` (relative to the root) out of the build context:
    a pattern matches the path or a directory above it; ``**/NAME`` matches at any depth."""
    patterns = [
        line.strip()
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for pattern in patterns:
        if pattern.startswith("**/"):
            if any(fnmatch.fnmatch(part, pattern.removeprefix("**/")) for part in parts):
                return True
        elif any(fnmatch.fnmatch(prefix, pattern) for prefix in prefixes):
            return True
    return False


def test_the_base_image_is_a_slim_python_pinned_to_a_patch_release() -> None:
    (base,) = all_of("FROM")
    assert re.fullmatch(r"python:3\.1[1-9]\.\d+-slim-\w+", base), base


def test_the_image_runs_dres_as_a_non_root_user() -> None:
    users = all_of("USER")
    assert users, "no USER: the processes would run as root"
    assert users[-1] not in {"root", "0"}
    assert json.loads(all_of("ENTRYPOINT")[-1]) == ["dres"]
    assert json.loads(all_of("CMD")[-1])[0] in {"worker", "api"}


def test_the_dependencies_are_installed_before_the_source_is_copied() -> None:
    """The slow layer (every dependency) is cached across changes of the source."""
    steps = [(k, rest) for k, rest in instructions() if k in {"COPY", "RUN"}]
    deps = next(
        i for i, (k, rest) in enumerate(steps) if "requirements.lock" in rest and k == "RUN"
    )
    source = next(i for i, (k, rest) in enumerate(steps) if k == "COPY" and "worker" in rest)
    assert deps < source
    copied_before = " ".join(rest for k, rest in steps[:deps] if k == "COPY")
    assert copied_before.split()[:-1] == ["requirements.lock"]


def test_the_dependency_step_installs_the_lock_with_every_hash_checked() -> None:
    (run,) = [rest for rest in all_of("RUN") if "requirements.lock" in rest]
    assert re.search(r"pip install --require-hashes --no-deps -r requirements\.lock", run), run


def locked() -> dict[str, str]:
    """requirements.lock's pins, name -> version; every pin carries at least one hash."""
    text = re.sub(r"\\\n", " ", (ROOT / "requirements.lock").read_text())
    pins = {}
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            spec, _, hashes = line.partition("--hash=sha256:")
            assert hashes, f"a pin without a hash: {line}"
            requirement = Requirement(spec.strip())
            (pin,) = requirement.specifier
            assert pin.operator == "==", line
            pins[canonicalize_name(requirement.name)] = pin.version
    return pins


def test_the_lock_pins_pyprojects_dependencies_and_both_provider_extras_within_their_ranges() -> (
    None
):
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = [*project["dependencies"], *project["optional-dependencies"]["anthropic"]]
    wanted += project["optional-dependencies"]["openai"]
    pins = locked()
    for spec in map(Requirement, wanted):
        name = canonicalize_name(spec.name)
        assert name in pins, f"{name} is not in requirements.lock: run make lock"
        assert spec.specifier.contains(pins[name]), f"{name}=={pins[name]} is outside {spec}"
    assert not {"pytest", "ruff", "mypy"} & pins.keys(), "the image gets no dev tools"


def test_dres_itself_is_installed_from_the_repo_without_its_dev_tools() -> None:
    installs = [rest for rest in all_of("RUN") if "pip install" in rest]
    assert any(re.search(r"pip install --no-deps \.(\s|$)", rest) for rest in installs)
    assert not any("[dev]" in rest or "-e " in rest for rest in installs)


@pytest.mark.parametrize(
    "path",
    [".venv/bin/python", ".git/HEAD", "worker/__pycache__/x.pyc", ".mypy_cache/x", "tests/x.py"],
)
def test_the_build_context_leaves_out(path: str) -> None:
    assert ignored(path)


@pytest.mark.parametrize(
    "path",
    [
        "requirements.lock",
        "pyproject.toml",
        "README.md",
        "ledger/lua/claim.lua",
        "worker/edges/cli/main.py",
    ],
)
def test_the_build_context_keeps_what_the_install_needs(path: str) -> None:
    assert (ROOT / path).exists()
    assert not ignored(path)
