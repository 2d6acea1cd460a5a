"""The ``configs`` kind: mutated KschedConfiguration files.

A valid configuration with every section (profiles with plugin arguments, metrics with
estimates and filters, batch, leader election, client connection, Prometheus, webhook,
hand-off, shadow, rebalance) is made odd, from the seed: a value anywhere replaced by the
wrong type, an out-of-range or huge number, a key removed or an unknown one added, deep
nesting; or the file itself odd (YAML aliases and bombs within the read cap, a file over the
cap, non-UTF-8 bytes, duplicated keys, several documents, empty). Each goes through
``ksched simulate --config`` in process (as the pods kind checks it) and through
:func:`ksched.config.load_config` as ``ksched run`` calls it: a ConfigError or acceptance,
never another exception; an accepted configuration then builds what ``ksched run`` builds from
it without a cluster (:func:`build_parts`).
"""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from typing import Any

import yaml

from ksched.bench.fuzz.nodes import fitting_pods, good_nodes
from ksched.bench.fuzz.report import NAMESPACE, Cli, FuzzReport
from ksched.bench.fuzz.simulate import call_simulate, check_simulate
from ksched.config import MAX_CONFIG_BYTES, Config, load_config
from ksched.engine import Engine
from ksched.errors import KschedError
from ksched.loop.leader import Leadership
from ksched.loop.metrics.metric_sources import MetricStore
from ksched.loop.metrics.prometheus import PrometheusSource
from ksched.loop.mirror.state import ClusterState
from ksched.loop.rebalancing.reservations import Reservations
from ksched.loop.scheduling.queue import SchedulingQueue
from ksched.loop.scheduling.shadow import Shadow
from ksched.loop.scheduling.webhook import self_signed
from ksched.loop.server import parse_address
from ksched.loop.telemetry import Telemetry

KIND = "configs"

BASE: dict[str, Any] = {
    "apiVersion": "ksched.io/v1alpha1",
    "kind": "KschedConfiguration",
    "profiles": [
        {
            "schedulerName": "ksched",
            "metrics": ["cpu_utilisation", "price"],
            "pluginConfig": [
                {
                    "name": "NodeResourcesFit",
                    "args": {"scoringStrategy": {"type": "MostAllocated", "resources": [{"name": "cpu", "weight": 1}]}},
                },
                {"name": "PodTopologySpread", "args": {"defaultingType": "List", "defaultConstraints": []}},
                {"name": "InterPodAffinity", "args": {"hardPodAffinityWeight": 1}},
            ],
        },
        {"schedulerName": "ksched-spare"},
    ],
    "prometheus": {"url": "http://127.0.0.1:9", "timeout": "2s"},
    "metrics": [
        {
            "name": "cpu_utilisation",
            "source": "prometheus",
            "query": "node:node_cpu_utilisation:ratio",
            "nodeLabel": "node",
            "prefer": "lower",
            "normalization": {"range": [0, 1]},
            "filter": {"above": 0.9},
            "missing": "neutral",
            "weight": 5,
            "maxAge": "2m",
            "refresh": {"min": "5s", "max": "15s"},
            "estimate": {"resource": "cpu", "window": "90s"},
        },
        {
            "name": "price",
            "source": "annotation",
            "annotation": "ksched.io/price",
            "prefer": "lower",
            "weight": 2,
            "missing": "worst",
        },
    ],
    "batch": {"maxSize": 256, "maxWait": "50ms", "bindWorkers": 8},
    "leaderElection": {"leaderElect": True, "leaseDuration": "15s", "renewDeadline": "10s", "retryPeriod": "2s"},
    "clientConnection": {"qps": 100, "burst": 200},
    "webhook": {"enabled": True, "address": "127.0.0.1:9443", "hosts": ["127.0.0.1"]},
    "handoff": {"enabled": False},
    "shadow": {"enabled": False, "keep": 100},
    "rebalance": {
        "enabled": True,
        "interval": "30s",
        "hotSamples": 3,
        "metrics": [{"name": "cpu_utilisation", "high": 0.8, "low": 0.6}],
        "maxPerCycle": 5,
    },
}  # fmt: skip

ODD_VALUES: list[Any] = [
    None, True, False, 0, -1, 1, 2**31, 2**63, 2**70, -(2**70), 1e308, -1e308, 0.5, "", "x", "1e999",
    "-5s", "0s", "1000000h", "NaN", "inf", "ü", "a" * 10_000, [], [None], {}, {"a": 1}, [[[]]],
    "http://", "0.0.0.0:99999", ":", "ksched", "cpu",
]  # fmt: skip
SECTIONS = ["profiles", "metrics", "batch", "leaderElection", "clientConnection", "prometheus", "webhook", "handoff", "shadow", "rebalance"]  # fmt: skip


def _paths(obj: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value in ``obj``."""
    out = [at]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, (*at, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _paths(v, (*at, i))
    return out


def _set(doc: Any, path: tuple[Any, ...], value: Any, delete: bool = False) -> None:
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    if delete:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value


def _deep(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


def _mutate_doc(rng: random.Random) -> tuple[str, Any]:
    doc = copy.deepcopy(BASE)
    for s in rng.sample(SECTIONS, rng.randrange(0, 4)):
        doc.pop(s, None)  # some sections absent, so others are reached alone
    done = []
    for _ in range(rng.choice([1, 1, 2, 3])):
        paths = [p for p in _paths(doc) if p]
        path = rng.choice(paths)
        choice = rng.randrange(10)
        if choice < 6:
            value = rng.choice(ODD_VALUES)
            _set(doc, path, value)
            done.append(f"{'.'.join(map(str, path))}={str(value)[:40]!r}")
        elif choice == 6 and len(path) > 0:
            _set(doc, path, None, delete=True)
            done.append(f"no {'.'.join(map(str, path))}")
        elif choice == 7:
            parent = doc
            for key in path[:-1]:
                parent = parent[key]
            if isinstance(parent, dict):
                parent[rng.choice(["unknown", "Profiles", "metrics ", "", "x" * 300])] = 1
            done.append(f"an unknown key at {'.'.join(map(str, path[:-1]))}")
        elif choice == 8:
            _set(doc, path, _deep(rng.choice([50, 500])))
            done.append(f"deep nesting at {'.'.join(map(str, path))}")
        else:
            _set(doc, path, [copy.deepcopy(rng.choice(ODD_VALUES)) for _ in range(rng.choice([2, 1000]))])
            done.append(f"a long list at {'.'.join(map(str, path))}")
    return "; ".join(done), doc


def _odd_text(rng: random.Random) -> tuple[str, bytes]:
    base = yaml.safe_dump(BASE)
    choice = rng.randrange(9)
    if choice == 0:
        bomb = "a: &a ['x','x','x','x','x','x','x','x','x']\n" + "".join(
            f"{c}: &{c} [{','.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True)
        )
        return "a YAML alias bomb", (bomb + base).encode()
    if choice == 1:
        return "a self-referring alias", b"profiles: &p [*p]\n" + base.encode()
    if choice == 2:
        return "a file over the cap", base.encode() + b"# " + b"x" * (MAX_CONFIG_BYTES + 10) + b"\n"
    if choice == 3:
        return "non-UTF-8 bytes", base.encode().replace(b"ksched", b"ks\xffched", 1)
    if choice == 4:
        return "duplicated keys", (base + "batch: {maxSize: 1}\n").encode()
    if choice == 5:
        return "two documents", (base + "---\n" + base).encode()
    if choice == 6:
        return "empty", rng.choice([b"", b"\n", b"---\n", b"null\n", b"[]\n", b"5\n"])
    if choice == 7:
        return "JSON with NaN", json.dumps({**BASE, "clientConnection": {"qps": float("nan")}}).encode()
    return "tabs and a BOM", b"\xef\xbb\xbf" + base.replace("  ", "\t", 3).encode()


def build_parts(config: Config) -> None:
    """What ``ksched run`` builds from ``config`` before it needs the API server (see
    :func:`ksched.loop.run.start`): telemetry, state, queue, leadership, an engine per
    profile (and the rebalancer's), the metric store, the webhook's certificate and
    address, the reservations and the shadow loop."""
    telemetry = Telemetry()
    state = ClusterState(config.metrics, telemetry=telemetry)
    SchedulingQueue()
    Leadership(config.leader_election, "fuzz", on_lost=telemetry.lost_leases.inc)
    for profile in config.profiles:
        Engine(config, profile.scheduler_name)
    if config.rebalance.enabled:
        Engine(config, config.rebalance.profile)
        Reservations(settle_s=config.rebalance.replacement_settle_s)
    prometheus = (
        PrometheusSource(config.prometheus.url, config.prometheus.timeout_s)
        if config.prometheus.url
        else None
    )
    metrics = MetricStore(config.metrics, prometheus, telemetry, list)
    if config.webhook.enabled:
        parse_address(config.webhook.address)
        if not (config.webhook.cert_file and config.webhook.key_file):
            self_signed(list(config.webhook.hosts))
    if config.shadow.enabled:
        Shadow(config, state, metrics, telemetry)


def configs_phase(report: FuzzReport, count: int, seed: int, workdir: Path, cli: Cli) -> None:
    """``count`` odd configuration files through ``simulate --config`` and ``load_config``."""
    rng = random.Random(f"configs-{seed}")
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    pods = fitting_pods()
    cluster = workdir / "c-cluster.json"
    cluster.write_text(
        json.dumps({"apiVersion": "v1", "kind": "List", "items": [*good_nodes(), namespace, *pods]})
    )
    path = workdir / "c-config.yaml"
    for i in range(count):
        if rng.random() < 0.15:
            what, body = _odd_text(rng)
        else:
            what, doc = _mutate_doc(rng)
            as_json = rng.random() < 0.3
            try:
                text = json.dumps(doc) if as_json else yaml.safe_dump(doc, allow_unicode=True)
            except RecursionError:  # PyYAML's writer recurses per level
                text = json.dumps(doc)
            body = text.encode()
        path.write_bytes(body)
        code = check_simulate(
            report,
            "configs simulate",
            i,
            call_simulate(cli, cluster, ["--config", str(path)]),
            len(pods),
            kind=KIND,
        )
        try:
            config = load_config(path)
        except KschedError:
            report.count(KIND, f"refused (simulate exit {code})")
            continue
        except Exception as exc:  # a traceback is what the fuzzer looks for
            report.raised("configs load", i, what, exc, KIND, "load_config raised")
            continue
        try:
            build_parts(config)
        except Exception as exc:
            report.raised("configs run", i, what, exc, KIND, "accepted, then failed to build")
            continue
        report.count(KIND, f"accepted (simulate exit {code})")
