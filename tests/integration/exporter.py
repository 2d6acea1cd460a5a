"""A tiny Prometheus exporter serving per-node gauges on loopback, for the real Prometheus to scrape."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ksched.cluster.gauges import GaugeServer

NODE_VALUES = {"kwok-node-00000": 0.25, "kwok-node-00001": 0.75, "kwok-node-00002": 0.5}


def utilization_metric(**extra: Any) -> dict[str, Any]:
    """ksched's metric on the exported gauge: the lowest utilization wins, a node without one is excluded."""
    return {
        "name": "utilization",
        "source": "prometheus",
        "query": "node_test_utilization",
        "nodeLabel": "node",
        "prefer": "lower",
        "missing": "exclude",
        "weight": 10,
        **extra,
    }


def _render() -> bytes:
    return (
        "# TYPE node_test_utilization gauge\n"
        + "".join(f'node_test_utilization{{node="{n}"}} {v}\n' for n, v in NODE_VALUES.items())
    ).encode()


@contextmanager
def serve() -> Iterator[str]:
    with GaugeServer(_render) as server:
        yield server.address
