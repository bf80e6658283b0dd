# syntax=docker/dockerfile:1
# The dres image: `dres worker`, `dres api` and the other commands of docs/commands.md.
#   docker build -t dres:local .      (compose.yaml builds it as dres:local too)
FROM python:3.11.13-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/dres/bin:$PATH

RUN python -m venv /opt/dres \
    && useradd --system --uid 10001 --user-group --create-home --home-dir /home/dres dres

WORKDIR /src

# The dependencies first, exactly as requirements.lock pins them (exported from uv.lock by
# `make lock`: the runtime dependencies and the anthropic, openai and otel extras, every file's hash
# checked): this layer is rebuilt when the lock changes, not on every change of the source.
COPY requirements.lock ./
RUN pip install --require-hashes --no-deps -r requirements.lock

# Then dres itself (its dependencies are in place already)
COPY pyproject.toml README.md ./
COPY ledger ledger
COPY worker worker
COPY tasks tasks
RUN pip install --no-deps . && rm -rf /src/*

USER dres
WORKDIR /home/dres
# the API; a worker's Prometheus metrics when DRES_METRICS_PORT is set (compose.yaml: 9808)
EXPOSE 8000 9808
ENTRYPOINT ["dres"]
CMD ["worker"]
