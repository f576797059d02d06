"""Shared by test modules (from test_metrics.py): no test module imports another."""

from prometheus_client.parser import text_string_to_metric_families


def samples(text: str) -> dict[tuple, float]:
    """{(sample name, sorted labels…): value} of a Prometheus text exposition (parsing it proves it is one)."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, *sorted(s.labels.items()))] = s.value
    return out
