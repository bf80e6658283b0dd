# dres — the two set-up commands are `make run` (the demo) and `make test` (the whole suite).
# Both work on a fresh Debian machine with Python 3.11+: they create .venv, install dres with its
# dev extra, and install redis-server with apt-get when it is missing.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
PYTEST_ARGS ?=

.PHONY: install redis-server chromium test lint bench bench-peers run clean chaos

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

redis-server:
	@scripts/ensure-redis-server

# Debian's chromium, which the browser tests (tests/browser, Playwright) drive.
chromium:
	@scripts/ensure-chromium

# The suite starts its own private redis-server (AOF on, free port) and Celery worker processes.
test: install redis-server chromium
	$(PY) -m pytest $(PYTEST_ARGS)

# ruff; mypy --strict on every package; and repeated code (6 lines or more) fails the build.
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy --strict --explicit-package-bases ledger worker tasks tests/support
	$(VENV)/bin/pylint --disable=all --enable=duplicate-code --min-similarity-lines=6 \
		--score=n ledger worker tasks tests/support

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
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build *.egg-info

# Fault injection on a real worker and redis-server: `make chaos` (200 trials) or TRIALS=N.
# NAIVE=1 runs the same trials with both layers and the interrupted-write guard off, and counts
# the duplicate effects a plain retry would have caused.
TRIALS ?= 200
SEED ?= 1
NAIVE ?= 0
chaos: install redis-server
	$(PY) -m chaos --trials $(TRIALS) --seed $(SEED) $(if $(filter 1,$(NAIVE)),--naive)
