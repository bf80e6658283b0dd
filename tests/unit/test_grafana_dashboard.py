"""docs/grafana-dashboard.json: a dashboard whose every query reads a series dres serves."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client import REGISTRY

from worker.base import metrics
from worker.edges.http.metrics import TurnCounts

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana-dashboard.json"


def served_names() -> set[str]:
    """Every sample name of the workers' metrics and of the API's turn counts."""
    metrics.get()
    families = [*REGISTRY.collect(), *TurnCounts(0, []).collect()]
    names = {s.name for f in families for s in f.samples}
    # a labelled family has samples once a label's series is made: name them all
    suffix = {"histogram": "_bucket", "counter": "_total"}
    names |= {f.name + suffix[f.type] for f in families if f.type in suffix}
    return {n for n in names if n.startswith("dres_")}


def test_every_query_of_the_dashboard_reads_a_series_dres_serves() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    read = {name for q in queries for name in re.findall(r"\bdres_\w+", q)}

    assert queries and dashboard["uid"] and dashboard["title"]
    assert read <= served_names(), sorted(read - served_names())
    assert {"dres_duplicates_prevented_total", "dres_tool_calls_total", "dres_tokens_total"} <= read


def test_the_dashboard_links_to_the_turns_traces_in_a_traces_data_source() -> None:
    """Tokens per model beside a link to the traces (docs/tracing.md): a turn is one trace."""
    dashboard = json.loads(DASHBOARD.read_text())
    sources = {v["name"]: v for v in dashboard["templating"]["list"] if v["type"] == "datasource"}
    [link] = dashboard["links"]
    assert "${traces}" in link["url"] and sources["traces"]["query"] == "tempo"
