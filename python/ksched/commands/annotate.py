"""``ksched annotate``: set, remove or list a per-node annotation metric (e.g. a price).

The annotation-source counterpart of the seed's price annotator: values are
written with a merge patch on each node, validated as numbers first, and
listed for every node (``-`` where a node has none). The Kubernetes client
(:mod:`ksched.loop.client`) is imported when the command runs, not with the command line.
"""

from __future__ import annotations

import argparse
import math

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


def annotate(kubeconfig: str | None, key: str, pairs: list[str]) -> list[tuple[str, str]]:
    """Apply the assignments, then return (node, value or "-") for every node."""
    from ksched.loop.client import Kube, load_configuration

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


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    a = sub.add_parser(
        "annotate",
        help="set, remove or list a per-node annotation metric such as a price",
        description="NODE=VALUE sets, NODE- removes; then every node's value is listed. "
        "Example: ksched annotate kwok-node-00000=0.12 kwok-node-00001=0.40",
    )
    a.add_argument("assignments", nargs="*", metavar="NODE=VALUE|NODE-")
    a.add_argument("--key", default="ksched.io/price", help="annotation key (default ksched.io/price)")
    a.add_argument("--kubeconfig")
    a.set_defaults(func=_annotate)


def _annotate(args: argparse.Namespace) -> int:
    rows = annotate(args.kubeconfig, args.key, args.assignments)
    width = max((len(n) for n, _ in rows), default=4)
    print(f"{'NODE':<{width}}  {args.key}")
    for node, value in rows:
        print(f"{node:<{width}}  {value}")
    return EXIT_OK
