"""``ksched annotate``: set, remove or list a per-node annotation metric (e.g. a price).

The annotation-source counterpart of the seed's price annotator: values are
written with a merge patch on each node, validated as numbers first, and
listed for every node (``-`` where a node has none).
"""

from __future__ import annotations

import math

from ksched.errors import KschedError
from ksched.loop.client import Kube, load_configuration

MERGE = "application/merge-patch+json"


def parse_assignments(pairs: list[str]) -> dict[str, str | None]:
    """``node=value`` (a number) or ``node-`` (remove)."""
    out: dict[str, str | None] = {}
    for pair in pairs:
        if pair.endswith("-") and "=" not in pair:
            out[pair[:-1]] = None
            continue
        node, sep, value = pair.partition("=")
        if not sep or not node:
            raise KschedError(f"{pair!r}: expected NODE=VALUE or NODE- (to remove)")
        try:
            number = float(value)
        except ValueError:
            raise KschedError(f"{pair!r}: {value!r} is not a number") from None
        if not math.isfinite(number):
            raise KschedError(f"{pair!r}: {value!r} is not a finite number")
        out[node] = value
    return out


def annotate(kubeconfig: str | None, key: str, pairs: list[str]) -> list[tuple[str, str]]:
    """Apply the assignments, then return (node, value or "-") for every node."""
    kube = Kube(load_configuration(kubeconfig, 4))
    for node, value in parse_assignments(pairs).items():
        patch = {"metadata": {"annotations": {key: value}}}
        r = kube.request("PATCH", f"/api/v1/nodes/{node}", body=patch, content_type=MERGE)
        if r.status == 404:
            raise KschedError(f"node {node!r} not found")
        if not r.ok:
            raise KschedError(f"annotating {node}: HTTP {r.status}: {r.data[:200]!r}")
    r = kube.request("GET", "/api/v1/nodes")
    if not r.ok:
        raise KschedError(f"listing nodes: HTTP {r.status}")
    rows = []
    for n in r.json()["items"]:
        annotations = n["metadata"].get("annotations") or {}
        rows.append((n["metadata"]["name"], str(annotations.get(key, "-"))))
    return sorted(rows)
