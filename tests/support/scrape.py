"""Read a live /metrics page (the operator's or the broker's) the way Prometheus does."""

from __future__ import annotations

from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample


@dataclass(frozen=True)
class Scrape:
    families: dict[str, list[Sample]]

    def value(self, name: str, **labels: str) -> float:
        """The sum of the samples called `name` whose labels include `labels` (0 when none)."""
        return sum(
            s.value
            for samples in self.families.values()
            for s in samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        )

    def sample_names(self) -> set[str]:
        return {s.name for samples in self.families.values() for s in samples}


def parse(text: str) -> Scrape:
    return Scrape({f.name: list(f.samples) for f in text_string_to_metric_families(text)})


def scrape(url: str) -> Scrape:
    response = httpx.get(url, timeout=5)
    response.raise_for_status()
    return parse(response.text)
