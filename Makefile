# dres — the two set-up commands are `make run` (the demo) and `make test` (the whole suite).
# Both work on a fresh Debian machine with Python 3.11+: they create .venv, install dres with its
# dev extra, and install redis-server with apt-get when it is missing.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
PYTEST_ARGS ?=

.PHONY: install redis-server test lint bench run clean chaos

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

redis-server:
	@scripts/ensure-redis-server

# The suite starts its own private redis-server (AOF on, free port) and Celery worker processes.
test: install redis-server
	$(PY) -m pytest $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy --strict ledger

# The demo: a private redis-server (or DRES_REDIS_URL), a prefork worker, one turn; it stops all.
run: install redis-server
	$(PY) -m worker.cli demo

bench: install redis-server
	$(PY) -m bench.ledger_bench

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build *.egg-info

# Fault injection on a real worker and redis-server: `make chaos` (200 trials) or TRIALS=N.
TRIALS ?= 200
SEED ?= 1
chaos: install redis-server
	$(PY) -m chaos --trials $(TRIALS) --seed $(SEED)
