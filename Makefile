# dres — the two set-up commands are `make run` (the demo) and `make test` (the whole suite).
# Both work on a fresh Debian machine with Python 3.11+: they bring uv (pinned, hash-checked) into
# .tools, install exactly what uv.lock pins into .venv (dres itself editable, with its dev extra),
# and install redis-server with apt-get when it is missing.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
PYTEST_ARGS ?=
# the suite's processes (pytest-xdist): most of a test's time is waiting on its workers and
# servers, so two halve the run on two vCPUs; a file's tests stay in one (module fixtures).
# TEST_WORKERS=0 runs it in this process alone.
TEST_WORKERS ?= 2
TOOLS ?= .tools
UV := $(TOOLS)/bin/uv
# uv uses the Python it is given and never downloads one; .venv is where the lock is installed
export UV_PYTHON_DOWNLOADS := never
export UV_PROJECT_ENVIRONMENT := $(VENV)
# uv trusts the system's certificate store, as pip does: behind a company proxy that re-signs TLS
# (its CA installed in the system store, no SSL_CERT_FILE set) uv's own bundle fails with
# "invalid peer certificate: UnknownIssuer". UV_SYSTEM_CERTS is uv 0.13's name for the older
# UV_NATIVE_TLS, which it still reads but warns about.
export UV_SYSTEM_CERTS := 1

.PHONY: install redis-server chromium test test-latest lint lock bench bench-peers run clean chaos fuzz

install: $(STAMP)

$(UV): scripts/uv-requirements.txt
	@scripts/ensure-uv $(PYTHON) $(TOOLS)

# --locked: uv.lock must match pyproject.toml (a stale lock fails here: run `make lock`)
$(STAMP): pyproject.toml uv.lock $(UV)
	$(UV) sync --quiet --locked --extra dev --python $(PYTHON)
	touch $(STAMP)

# Re-resolve the lock to the newest releases pyproject.toml's ranges allow, and write the hashed
# requirements.lock the Dockerfile installs from (the runtime dependencies, provider extras, otel).
lock: $(UV)
	$(UV) lock --upgrade --python $(PYTHON)
	$(UV) export --quiet --frozen --no-dev --no-emit-project --extra anthropic --extra openai --extra otel \
		--extra pydantic-ai --extra openai-agents --no-header \
		--format requirements-txt --output-file requirements.lock

redis-server:
	@scripts/ensure-redis-server

# Debian's chromium, which the browser tests (tests/browser, Playwright) drive.
chromium:
	@scripts/ensure-chromium

# The suite starts its own private redis-server (AOF on, free port) and Celery worker processes.
test: install redis-server chromium
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# schemathesis against the API's own OpenAPI document, every check on, then its stateful phase
# following the document's links (POST /v1/turns -> status, events, journal, Continue, Stop,
# conversation), on a real `dres api`, worker and redis-server: 0 failures, and the stateful calls
# counted by route and status. `make test` runs the same test with a few examples (about 40 s).
FUZZ_EXAMPLES ?= 50
FUZZ_SECONDS ?= 120
FUZZ_SEED ?= 1
fuzz: install redis-server
	DRES_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) DRES_FUZZ_SECONDS=$(FUZZ_SECONDS) DRES_FUZZ_SEED=$(FUZZ_SEED) \
		$(PY) -m pytest -s -p no:logging tests/api/test_api_schemathesis.py

# The same suite on the newest releases pyproject.toml's ranges allow (not the lock), in its own
# virtualenv: an upgrade tried on purpose before `make lock` adopts it.
LATEST_VENV ?= .venv-latest
test-latest: $(UV) redis-server chromium
	$(UV) venv --quiet --allow-existing --python $(PYTHON) $(LATEST_VENV)
	VIRTUAL_ENV=$(LATEST_VENV) $(UV) pip install --quiet --refresh --upgrade -e '.[dev]'
	$(LATEST_VENV)/bin/python -c "import celery, kombu, redis; print('latest: redis-py', redis.__version__, 'celery', celery.__version__, 'kombu', kombu.__version__)"
	$(LATEST_VENV)/bin/python -m pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# ruff; mypy --strict on every package; and repeated code (6 lines or more) fails the build.
lint: install
	$(UV) lock --check --python $(PYTHON)
	$(UV) export --quiet --frozen --no-dev --no-emit-project --extra anthropic --extra openai --extra otel \
		--extra pydantic-ai --extra openai-agents --no-header \
		--format requirements-txt | diff -u requirements.lock - \
		|| { echo "requirements.lock is stale: run make lock" >&2; exit 1; }
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy --strict --explicit-package-bases ledger worker tasks rigs tests/support
	$(VENV)/bin/pylint --disable=all --enable=duplicate-code --min-similarity-lines=6 \
		--score=n ledger worker tasks rigs tests/support

# The demo: a private redis-server (or DRES_REDIS_URL), a prefork worker, one turn; it stops all.
run: install redis-server
	$(PY) -m worker.edges.cli demo

# Every row in one table, each dres figure beside its baseline from the same run (private
# redis-server, a real prefork worker); writes bench/results.json and bench/RESULTS.md.
bench: install redis-server
	$(PY) -m bench --markdown bench/RESULTS.md

# Row 6's peer, DBOS Transact on SQLite, in its own virtualenv (never in dres's): writes
# bench/peers/dbos.json, which `make bench` then reads.
PEERS_VENV ?= .venv-peers
PEERS_STAMP := $(PEERS_VENV)/.installed-stamp

$(PEERS_STAMP):
	test -x $(PEERS_VENV)/bin/python || $(PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/python -m pip install --quiet 'dbos==3.4.0'
	touch $(PEERS_STAMP)

bench-peers: $(PEERS_STAMP)
	$(PEERS_VENV)/bin/python bench/peers/dbos_bench.py

clean:
	rm -rf $(VENV) $(LATEST_VENV) $(TOOLS) .pytest_cache .mypy_cache .ruff_cache build *.egg-info

# Fault injection on a real worker and redis-server: `make chaos` (200 trials) or TRIALS=N.
# NAIVE=1 runs the same trials with both layers and the interrupted-write guard off, and counts
# the duplicate effects a plain retry would have caused. KINDS="redis_restart redis_pause" draws
# only those faults; KINDS=failover (alone, never drawn otherwise) fails a Sentinel-monitored
# master over instead, on a primary, a replica and three Sentinels; KINDS=elsewhere (alone too)
# runs a turn of tools from an MCP server and an HTTP API under worker kills, soft limits, and
# servers that hang or die mid-write (chaos/elsewhere.py); KINDS=approval (alone, never drawn
# otherwise) has every write wait for a person the runner plays, faults around a decision;
# KINDS=conversation (alone too) sends a second message, a regenerate or a retry mid-turn;
# KINDS=timer (alone too, either pool) runs turns that wait on a timer (wait_until) on two
# workers, faults around the wait and the wake: every timer wakes once, never early
# (chaos/timers.py).
# HOG=N runs N busy loops beside the worker (a host at load) and counts false takeovers.
# POOL=gevent runs them on `dres worker -P gevent` workers, 50 more turns in flight per trial.
# TENANTS=N: each trial's turns under 2-3 tenants, DRES_TENANT_CONCURRENCY=N; none may run more.
# KINDS=schedule (alone, either pool) runs schedules ticking on two workers whose reapers race
# for each tick, one fault around a tick: no tick twice, none early, ticks keep coming
# (chaos/schedules.py).
TRIALS ?= 200
SEED ?= 1
NAIVE ?= 0
KINDS ?=
HOG ?= 0
POOL ?= prefork
TENANTS ?= 0
chaos: install redis-server
	$(PY) -m chaos --trials $(TRIALS) --seed $(SEED) $(if $(filter 1,$(NAIVE)),--naive) \
		$(if $(strip $(KINDS)),--only $(KINDS)) $(if $(filter-out 0,$(HOG)),--hog $(HOG)) \
		$(if $(filter-out 0,$(TENANTS)),--tenants $(TENANTS)) --pool $(POOL)
