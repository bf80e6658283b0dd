"""Reading Prometheus text as a scraper does (``prometheus_client.parser``)."""

from __future__ import annotations

from collections.abc import Mapping

import httpx
from prometheus_client.parser import text_string_to_metric_families


class Scrape:
    """One scrape: every sample by its name and labels, and every family's name and type."""

    def __init__(self, text: str) -> None:
        self.samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
        self.families: dict[str, str] = {}
        for family in text_string_to_metric_families(text):
            self.families[family.name] = family.type
            for sample in family.samples:
                self.samples[(sample.name, frozenset(sample.labels.items()))] = sample.value

    def value(self, name: str, **labels: str) -> float:
        """The sample's value; 0 when the scrape has no such sample."""
        return self.samples.get((name, frozenset(labels.items())), 0.0)

    def total(self, name: str, **labels: str) -> float:
        """The sum of the samples of ``name`` whose labels include ``labels``."""
        wanted = set(labels.items())
        return sum(v for (n, have), v in self.samples.items() if n == name and wanted <= have)


def scrape(url: str, headers: Mapping[str, str] | None = None) -> Scrape:
    """GET ``url`` (Prometheus text) and parse it; a status other than 200 fails."""
    reply = httpx.get(url, headers=dict(headers or {}), timeout=5)
    reply.raise_for_status()
    assert reply.headers["content-type"].startswith("text/plain"), reply.headers
    return Scrape(reply.text)
