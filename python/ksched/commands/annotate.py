"""``ksched annotate``: set, remove or list a per-node annotation metric (e.g. a price).

The annotation-source counterpart of the seed's price annotator: values are
written with a merge patch on each node, validated as numbers first, each with
the time it was written in a timestamp annotation beside it (``<key>-timestamp``,
RFC 3339: a metric's ``maxAge`` applies to it; removed with the value), and listed
for every node (``-`` where a node has none). The Kubernetes client
(:mod:`ksched.loop.client`) is imported when the command runs, not with the command line.
"""

from __future__ import annotations

import argparse
import math
from datetime import UTC, datetime

from ksched.commands.exit_codes import EXIT_OK
from ksched.errors import KschedError

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


def timestamp_key(key: str) -> str:
    """The annotation that says when ``key``'s value was measured (the metric's default)."""
    return f"{key}-timestamp"


def value_annotations(key: str, timestamp: str, value: str | None, at: datetime) -> dict[str, str | None]:
    """The merge patch's annotations: the value and when it was measured, or neither (removed)."""
    return {
        key: value,
        timestamp: None if value is None else at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def annotate(
    kubeconfig: str | None, key: str, pairs: list[str], timestamp: str | None = None
) -> list[tuple[str, str]]:
    """Apply the assignments (each value with the time, in ``timestamp``: by default
    ``<key>-timestamp``), then return (node, value or "-") for every node."""
    from ksched.loop.client import Kube, load_configuration

    timestamp = timestamp or timestamp_key(key)
    kube = Kube(load_configuration(kubeconfig, 4))
    for node, value in parse_assignments(pairs).items():
        patch = {"metadata": {"annotations": value_annotations(key, timestamp, value, datetime.now(UTC))}}
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


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    a = sub.add_parser(
        "annotate",
        help="set, remove or list a per-node annotation metric such as a price",
        description="NODE=VALUE sets (with the time, in KEY-timestamp: a metric's maxAge applies to it), "
        "NODE- removes (and its time); then every node's value is listed. "
        "Example: ksched annotate kwok-node-00000=0.12 kwok-node-00001=0.40",
    )
    a.add_argument("assignments", nargs="*", metavar="NODE=VALUE|NODE-")
    a.add_argument("--key", default="ksched.io/price", help="annotation key (default ksched.io/price)")
    a.add_argument(
        "--timestamp-key",
        help="annotation holding when each value was written (default KEY-timestamp, "
        "as a metric's timestampAnnotation defaults)",
    )
    a.add_argument("--kubeconfig")
    a.set_defaults(func=_annotate)


def _annotate(args: argparse.Namespace) -> int:
    rows = annotate(args.kubeconfig, args.key, args.assignments, args.timestamp_key)
    width = max((len(n) for n, _ in rows), default=4)
    print(f"{'NODE':<{width}}  {args.key}")
    for node, value in rows:
        print(f"{node:<{width}}  {value}")
    return EXIT_OK
