# syntax=docker/dockerfile:1
# The dres image: `dres worker`, `dres api` and the other commands of CONTRACT §2.
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

# The dependencies first, read from pyproject.toml with the anthropic and openai extras: this
# layer is rebuilt when pyproject.toml changes, not on every change of the source.
COPY pyproject.toml ./
RUN python -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; x = p['optional-dependencies']; print('\n'.join(p['dependencies'] + x['anthropic'] + x['openai']))" > requirements.txt \
    && pip install -r requirements.txt

# Then dres itself (its dependencies are in place already)
COPY README.md ./
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
