"""The API against its own OpenAPI document, every schemathesis check on (``--checks all``), with
the stateful phase following the document's links from ``POST /v1/turns`` to status, events,
journal, Continue, Stop and the conversation routes; on a real ``dres api``, a prefork worker and
a redis-server. ``make fuzz`` runs this file with more examples (``DRES_FUZZ_EXAMPLES``); in
``make test`` it runs with a few, to stay within a minute.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from rigs import DONE, ApiProcess, WorkerProcess, stop_all
from rigs.scripts import write_script
from tests.support.fixtures import StartWorker

#: examples per operation and phase (``make fuzz`` asks for more)
EXAMPLES = int(os.environ.get("DRES_FUZZ_EXAMPLES", "8"))
#: seconds the stateful phase runs (its scenarios repeat until the time is spent)
STATEFUL_S = int(os.environ.get("DRES_FUZZ_SECONDS", "20"))
#: seconds a request may take: an event stream lasts until its turn ends (a turn of one step)
REQUEST_TIMEOUT_S = 20
#: characters of each line of schemathesis's report shown
LINE_CHARS = 300
SCHEMATHESIS = Path(sys.executable).parent / "st"
#: its settings: a header pinned around a schemathesis bug (the file says which)
CONFIG = Path(__file__).with_name("schemathesis.toml")
#: a line of the API's access log: the method, the path, the status
ACCESS = re.compile(
    r'^\S+Z \[info\s*\] [\d.:]+ - "(?P<method>[A-Z]+) (?P<path>\S+) HTTP/[\d.]+" '
    r"(?P<status>\d{3})",
    re.MULTILINE,
)
#: a real turn's or conversation's id in a path (what the links carried)
ID_SEGMENT = re.compile(r"/(?P<kind>turn|conv)_[0-9a-f]{32}")

pytestmark = [pytest.mark.redis_server, pytest.mark.timeout(STATEFUL_S + 150)]


@pytest.fixture
def fuzzed(
    dres_env: dict[str, str], tmp_path: Path, start_worker: StartWorker
) -> Iterator[ApiProcess]:
    """A ``dres api`` and a worker whose default model fails its first attempt (``auth``): every
    fuzzed turn stops at once with Continue available, and a Continue completes it, so the links
    to Continue and Stop meet turns that can take them, and every event stream soon closes."""
    model = write_script(tmp_path / "answer.json", [{**DONE, "fail": "auth"}])
    start_worker(overrides={"DRES_MODEL": model})
    api = ApiProcess.start({**dres_env, "DRES_MODEL": model}, tmp_path / "api.log", ready=False)
    try:
        api.wait_ready()
        yield api
    finally:
        stop_all([api])


def schemathesis(url: str, *phases: str, cwd: Path, extra: tuple[str, ...] = ()) -> int:
    """Run ``st run`` on the API's document, every check on; its report printed, each line cut
    (a fuzzed body may be a megabyte long); its exit status."""
    done = subprocess.run(
        [
            str(SCHEMATHESIS),
            "--config-file",
            str(CONFIG),
            "run",
            f"{url}/openapi.json",
            "--checks",
            "all",
            "--phases",
            ",".join(phases),
            "--seed",
            os.environ.get("DRES_FUZZ_SEED", "1"),
            "--workers",
            "1",
            "--request-timeout",
            str(REQUEST_TIMEOUT_S),
            "--generation-database",
            "none",
            "--no-color",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=STATEFUL_S + 120,
        cwd=cwd,
    )
    print("\n".join(line[:LINE_CHARS] for line in done.stdout.splitlines()), done.stderr[-4000:])
    return done.returncode


def test_schemathesis_every_check_and_the_stateful_phase_find_no_failure(
    fuzzed: ApiProcess, tmp_path: Path, worker: WorkerProcess
) -> None:
    examples = ("--max-examples", str(EXAMPLES))
    status = schemathesis(
        fuzzed.url, "examples", "coverage", "fuzzing", cwd=tmp_path, extra=examples
    )
    assert status == 0, "schemathesis found failures (see its report above)"

    # the stateful phase alone, for a fixed time: it follows the links from turn to turn
    offset = fuzzed.log_path.stat().st_size
    limit = ("--max-time", str(STATEFUL_S))
    status = schemathesis(fuzzed.url, "stateful", cwd=tmp_path, extra=(*examples, *limit))
    with fuzzed.log_path.open() as log:
        log.seek(offset)
        calls = answers(log.read())
    print(f"stateful calls: {sum(calls.values())}")
    for label, count in sorted(calls.items()):
        print(f"  {count:6d}  {label}")
    assert status == 0, "schemathesis's stateful phase found failures (see its report above)"
    for route in ("/v1/turns/turn_{id}/continue", "/v1/turns/turn_{id}/stop"):
        # on a real turn, an id a link carried: 202, or 409 with the reason (already ended)
        reached = sum(n for label, n in calls.items() if label.startswith(f"POST {route} "))
        assert reached, f"the stateful phase never reached {route} of a real turn: {dict(calls)}"


def answers(access_log: str) -> Counter[str]:
    """The API's answers by ``METHOD /route status``, a real turn's or conversation's id in a
    path written ``turn_{id}``/``conv_{id}`` (the ids the links carried)."""
    calls: Counter[str] = Counter()
    for match in ACCESS.finditer(access_log):
        route = ID_SEGMENT.sub(lambda m: "/" + m["kind"] + "_{id}", match["path"])
        calls[f"{match['method']} {route.partition('?')[0]} {match['status']}"] += 1
    return calls


def test_schemathesis_still_makes_no_header_value_of_a_stream_id() -> None:
    """The tripwire of ``schemathesis.toml``'s pinned ``Last-Event-ID``: the coverage phase
    makes no value of a header whose pattern needs a ``-`` (schemathesis/schemathesis#4205). When
    this fails, it makes one: unpin the header."""
    import jsonschema_rs
    from schemathesis.core.jsonschema.patterns import update_quantifier
    from schemathesis.core.parameters import ParameterLocation
    from schemathesis.generation.modes import GenerationMode
    from schemathesis.specs.openapi.coverage._schema import CoverageContext, cover_schema_iter

    from worker.edges.http.document import STREAM_ID_SCHEMA

    def values(location: ParameterLocation) -> list[object]:
        context = CoverageContext(
            root_schema=STREAM_ID_SCHEMA,
            location=location,
            media_type=None,
            generation_modes=[GenerationMode.POSITIVE],
            is_required=False,
            custom_formats={},
            validator_cls=jsonschema_rs.Draft202012Validator,
            update_pattern=update_quantifier,
        )
        return [generated.value for generated in cover_schema_iter(context, STREAM_ID_SCHEMA)]

    assert values(ParameterLocation.QUERY), "schemathesis makes a query's stream id"
    assert values(ParameterLocation.HEADER) == [], "schemathesis makes a header's: unpin it"
