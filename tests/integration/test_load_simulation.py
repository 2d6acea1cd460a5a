"""The load simulation on its own small cluster: a pod's usage profile, evaluated by KWOK,
reaches Prometheus's node rules and metrics-server's ``metrics.k8s.io`` through real scrapes."""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from ksched.cluster import load, local
from ksched.cluster.build import BuildError, missing_binaries
from ksched.cluster.load import LoadSimulation, UsageProfile
from ksched.cluster.prometheus import prometheus_binary
from ksched.config import load_config
from ksched.config.examples import example_path
from ksched.engine.quantity import parse_quantity
from ksched.loop.client import Kube, load_configuration
from tests.integration.helpers import create, make_pod, unavailable, wait_for

pytestmark = pytest.mark.cluster

SCRAPE_S = 1.0
# Node 0 is an m5.xlarge (4 CPUs, 16Gi), nodes 1 and 2 have 8 CPUs, nodes 3 and 4 4: see local.fake_nodes.
FLAT_NODE, RAMP_NODE, DEFAULT_NODE, EMPTY_NODE, BURST_NODE = (f"kwok-node-{i:05d}" for i in range(5))
FLAT = UsageProfile(base=0.5)
RAMP = UsageProfile(base=1.0, ramp_s=24)
# Of 2 CPUs requested, 0.5 cores used, and 3 in the last 10 s of every 20 of the clock since
# an epoch (set when the pod is made).
BURST_EVERY_S = 20
BURST = UsageProfile(base=0.25, burst_every_s=BURST_EVERY_S, burst_for_s=10, burst_to=1.5, burst_epoch_s=0)
TOLERANCE = 0.05


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[local.ClusterState, Kube, float]]:
    """A five-node cluster with the load simulation on, a pod with a flat profile bound to
    node 0, one with a ramping profile bound to node 1, on node 2 a pod with no profile and
    a BestEffort pod, none on node 3, and one bursting by the clock on node 4; yields when
    the pods were created."""
    if shutil.which("go") is None and missing_binaries(with_helm=False, with_metrics_server=True):
        unavailable("Go is not installed and no cached binaries exist")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KSCHED_CLUSTER_DIR", str(tmp_path_factory.mktemp("load-simulation")))
        try:
            state = local.up(
                nodes=5,
                zones=1,
                load_simulation=LoadSimulation(scrape_interval_s=SCRAPE_S, metric_resolution_s=10),
            )
        except (BuildError, local.ClusterError) as err:
            unavailable(str(err))
            raise
        try:
            kube = Kube(load_configuration(state.kubeconfig, 4))
            pods = []
            for name, node, profile, cpu, memory in (
                ("flat", FLAT_NODE, FLAT, "1", "1Gi"),
                ("ramp", RAMP_NODE, RAMP, "4", "4Gi"),
                ("burst", BURST_NODE, replace(BURST, burst_epoch_s=int(time.time()) - 7), "2", "1Gi"),
            ):
                pod = make_pod(name, "default", cpu=cpu, memory=memory, nodeName=node)
                pod["metadata"]["annotations"] = load.usage_annotations(profile)
                pods.append(pod)
            best_effort = make_pod("best-effort", "default", nodeName=DEFAULT_NODE)
            best_effort["spec"]["containers"][0]["resources"] = {}
            pods += [make_pod("plain", "default", cpu="2", memory="1Gi", nodeName=DEFAULT_NODE), best_effort]
            create(kube, pods)
            yield state, kube, time.monotonic()
        finally:
            local.down()


def query(state: local.ClusterState, promql: str) -> dict[str, float]:
    """The instant vector of ``promql``, by node."""
    url = f"{state.prometheus}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
    with urllib.request.urlopen(url, timeout=5) as resp:
        result = json.loads(resp.read())["data"]["result"]
    return {r["metric"].get("node", ""): float(r["value"][1]) for r in result}


SYSTEM_CPU, SYSTEM_MEMORY = load.NODE_SYSTEM_CPU_CORES, load.NODE_SYSTEM_MEMORY_BYTES
MI = 2**20


def test_a_ramping_profile_shows_a_rising_utilisation(
    simulated: tuple[local.ClusterState, Kube, float],
) -> None:
    state, _, created = simulated
    seen: list[float] = []
    while time.monotonic() - created < RAMP.ramp_s + 10:
        value = query(state, "node:node_cpu_utilisation:ratio").get(RAMP_NODE)
        if value is not None:
            seen.append(value)
        time.sleep(2)
    # 4 of 8 CPUs requested, used at 0 to 1 times the request over 24 s, beside the node's own.
    assert len(seen) >= 10, seen
    assert seen[0] < 0.2 and seen[-1] == pytest.approx((4 + SYSTEM_CPU) / 8, rel=TOLERANCE), seen
    assert all(later >= earlier - 0.01 for earlier, later in itertools.pairwise(seen)), seen


def test_clock_timed_bursts_follow_the_clock_not_the_pods_start(
    simulated: tuple[local.ClusterState, Kube, float],
) -> None:
    """synchronized-bursts' pods burst together because KWOK times their bursts by the clock."""
    state, kube, _ = simulated
    pod = kube.request("GET", "/api/v1/namespaces/default/pods/burst").json()
    epoch, started = int(pod["metadata"]["annotations"][load.BURST_EPOCH]), pod["status"].get("startTime")
    high, low = [], []
    deadline = time.monotonic() + 2.5 * BURST_EVERY_S
    while time.monotonic() < deadline:
        url = f"{state.prometheus}/api/v1/query?{urllib.parse.urlencode({'query': 'node:node_cpu_usage_cores:rate'})}"
        with urllib.request.urlopen(url, timeout=5) as resp:
            result = json.loads(resp.read())["data"]["result"]
        for r in result:
            if r["metric"].get("node") == BURST_NODE:
                at, cores = float(r["value"][0]), float(r["value"][1])
                phase = (at - epoch) % BURST_EVERY_S
                # A rate over 4 s, a scrape and a rule behind: the burst's last 4 s, or the
                # 4 s before it starts.
                if 16 <= phase < 19.5:
                    high.append((phase, cores))
                elif 6 <= phase < 9.5:
                    low.append((phase, cores))
        time.sleep(1)
    assert len(high) >= 3 and len(low) >= 3, (high, low)
    # In the burst 3 cores, outside it 0.5, beside the node's own.
    assert all(cores > 2.0 for _, cores in high), (high, started)
    assert all(cores < 1.5 for _, cores in low), (low, started)


def test_profiles_and_their_defaults_set_node_utilisation(
    simulated: tuple[local.ClusterState, Kube, float],
) -> None:
    state, _, _ = simulated
    # 1 CPU and 1Gi requested, used at half, beside the node's own: of 4 CPUs and 16Gi.
    flat_cpu = (0.5 + SYSTEM_CPU) / 4

    def settled() -> bool:
        return (
            abs(query(state, "node:node_cpu_utilisation:ratio").get(FLAT_NODE, 0) - flat_cpu)
            < flat_cpu * TOLERANCE
        )

    assert wait_for(settled, timeout=60), query(state, "node:node_cpu_utilisation:ratio")
    memory = query(state, "node:node_memory_utilisation:ratio")
    assert memory[FLAT_NODE] == pytest.approx((512 * MI + SYSTEM_MEMORY) / (16 * 1024 * MI)), memory
    assert query(state, "node:node_cpu_allocatable_cores:sum") == {
        FLAT_NODE: 4.0,
        RAMP_NODE: 8.0,
        DEFAULT_NODE: 8.0,
        EMPTY_NODE: 4.0,
        BURST_NODE: 4.0,
    }
    # Without a profile a pod uses its requests, a BestEffort container 10m and 32Mi.
    cores = query(state, "node:node_cpu_usage_cores:rate")
    assert cores[DEFAULT_NODE] == pytest.approx(2.01 + SYSTEM_CPU, rel=TOLERANCE / 10), cores
    assert cores[EMPTY_NODE] == pytest.approx(SYSTEM_CPU, rel=TOLERANCE), cores
    working_set = query(state, "node:node_memory_working_set_bytes:sum")
    assert working_set[DEFAULT_NODE] == (1024 + 32) * MI + SYSTEM_MEMORY, working_set
    assert working_set[EMPTY_NODE] == SYSTEM_MEMORY, working_set


def test_metrics_server_serves_the_nodes_usage(simulated: tuple[local.ClusterState, Kube, float]) -> None:
    """What `kubectl top nodes` reads, through kube-apiserver's aggregation layer."""
    _, kube, _ = simulated

    def usage() -> dict[str, dict[str, str]]:
        r = kube.request("GET", "/apis/metrics.k8s.io/v1beta1/nodes")
        return {n["metadata"]["name"]: n["usage"] for n in r.json()["items"]} if r.status == 200 else {}

    def settled() -> bool:
        cpu = usage().get(FLAT_NODE, {}).get("cpu")
        return cpu is not None and abs(float(parse_quantity(cpu)) - 0.55) < 0.55 * TOLERANCE

    assert wait_for(settled, timeout=60, interval=1), usage()
    nodes = usage()
    # A node with no pod is listed too, with what its system uses.
    assert set(nodes) == {FLAT_NODE, RAMP_NODE, DEFAULT_NODE, EMPTY_NODE, BURST_NODE}
    assert float(parse_quantity(nodes[FLAT_NODE]["memory"])) == 512 * MI + SYSTEM_MEMORY, nodes
    assert float(parse_quantity(nodes[EMPTY_NODE]["cpu"])) == pytest.approx(SYSTEM_CPU, rel=TOLERANCE), nodes
    pod = kube.request("GET", "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/flat")
    assert pod.status == 200, pod.data[:300]
    assert float(parse_quantity(pod.json()["containers"][0]["usage"]["cpu"])) == pytest.approx(
        0.5, rel=TOLERANCE
    )


def test_recording_rules_compute_utilisation_from_the_kubelets_series(tmp_path: Path) -> None:
    """``promtool test rules`` on synthetic series: a node that uses 1 core a second of 4
    allocatable is at 0.25; the cluster's ratio weighs nodes by their allocatable."""
    promtool = str(Path(prometheus_binary()).with_name("promtool"))
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps(load.recording_rules(LoadSimulation())))
    job = f'job="{load.SCRAPE_JOB}"'
    cases = {
        "rule_files": [str(rules)],
        "evaluation_interval": "15s",
        "tests": [
            {
                "interval": "15s",
                "input_series": [
                    {"series": f'node_cpu_usage_seconds_total{{{job},node="a"}}', "values": "0+15x20"},
                    {"series": f'node_cpu_usage_seconds_total{{{job},node="b"}}', "values": "0+30x20"},
                    {
                        "series": f'kube_node_status_allocatable{{{job},node="a",resource="cpu",unit="core"}}',
                        "values": "4x20",
                    },
                    {
                        "series": f'kube_node_status_allocatable{{{job},node="b",resource="cpu",unit="core"}}',
                        "values": "8x20",
                    },
                ],
                "promql_expr_test": [
                    {
                        "expr": "node:node_cpu_utilisation:ratio",
                        "eval_time": "4m",
                        "exp_samples": [
                            {"labels": "node:node_cpu_utilisation:ratio{node='a'}", "value": 0.25},
                            {"labels": "node:node_cpu_utilisation:ratio{node='b'}", "value": 0.25},
                        ],
                    },
                    {
                        "expr": "cluster:node_cpu_utilisation:ratio",
                        "eval_time": "4m",
                        "exp_samples": [{"labels": "cluster:node_cpu_utilisation:ratio", "value": 0.25}],
                    },
                ],
            }
        ],
    }
    path = tmp_path / "test.json"
    path.write_text(json.dumps(cases))
    out = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_examples_pod_query_measures_a_pod_from_its_first_scrape(tmp_path: Path) -> None:
    """``examples/load-aware.yaml``'s ``podQuery`` on the kubelet's series (``promtool test
    rules``): a pod with one scrape reads its CPU time over the seconds since its container
    started, so a heavy pod shows a scrape before its rate can; a pod with two reads its rate,
    not its average since it started; a start time after the scrape gives no value rather than
    a negative or infinite one, and so does a pod past the rate's minute that has no rate."""
    promtool = str(Path(prometheus_binary()).with_name("promtool"))
    estimate = load_config(example_path("load-aware.yaml")).metrics[0].estimate
    assert estimate is not None and estimate.pod_query is not None

    def series(pod: str, usage: str, started: str) -> list[dict[str, str]]:
        at = f'job="{load.SCRAPE_JOB}",node="a",namespace="ns",pod="{pod}"'
        return [
            {"series": f"pod_cpu_usage_seconds_total{{{at}}}", "values": usage},
            {"series": f'container_start_time_seconds{{{at},container="app"}}', "values": started},
        ]

    cases = {
        "evaluation_interval": "15s",
        "tests": [
            {
                "interval": "15s",
                # Scrapes at 0, 15 and 30 s.
                "input_series": [
                    # Half a core since 0 s: 7.5 core-seconds a scrape.
                    *series("steady", "0+7.5x2", "0 0 0"),
                    # Started at 12 s, first scraped at 30 s with 9 core-seconds: half a core.
                    *series("new", "_ _ 9", "_ _ 12"),
                    # Idle for its first scrape, then 2 cores: its average since 0 s is 1 core.
                    *series("faster", "0 0 30", "0 0 0"),
                    # A start time after its one scrape (a skewed clock).
                    *series("skewed", "_ _ 9", "_ _ 40"),
                    # Started 100 s before the first scrape, scraped once: past the rate's
                    # minute, its lifetime's average is not what it uses now.
                    *series("lapsed", "_ _ 65", "_ _ -70"),
                ],
                "promql_expr_test": [
                    {
                        "expr": estimate.pod_query,
                        "eval_time": "40s",
                        "exp_samples": [
                            {"labels": "{namespace='ns',pod='steady'}", "value": 0.5},
                            {"labels": "{namespace='ns',pod='new'}", "value": 0.5},
                            {"labels": "{namespace='ns',pod='faster'}", "value": 2.0},
                        ],
                    }
                ],
            }
        ],
    }
    path = tmp_path / "test.json"
    path.write_text(json.dumps(cases))
    out = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
