"""ksched as users run it: its image, built from this checkout, deployed from deploy/ (a
kustomize overlay that swaps the image in) and from the Helm chart, on a real kubelet.

One cluster of its own (``up --real-nodes 1`` beside 4 KWOK nodes, kube-scheduler as the
default scheduler that places ksched's own pods): the pods must be Ready, hold the Lease,
bind pods on the real node (their containers running) and on KWOK nodes, route a pod of an
opted-in namespace through the webhook behind its Service, serve /metrics through the
Service over HTTPS to a ServiceAccount bound to ksched-metrics-reader, answer ``ksched status`` and agree with a live ``ksched explain``; the leader's
death and a rolling upgrade lose no pod and bind none twice; shadow mode binds nothing.
The image is the session's (conftest's ``image``); the upgrade's second tag is that image with
one more label, so its pods run another image. Measured here: ``up`` to a Ready real node 5-7 s,
an install to 2 Ready pods 6-9 s, the whole module about 3 minutes.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from ksched.cluster import local, realnode
from ksched.cluster.build import BuildError, ensure_built, helm_binary
from ksched.cluster.image import build as image_build
from ksched.cluster.image.tools import ImageError, run
from ksched.config import parse_config
from ksched.loop.client import Kube, load_configuration, service_account_kubeconfig
from ksched.loop.metrics.prometheus import NodeResolver, PrometheusSource
from tests.integration.helpers import (
    Obj,
    create,
    kubectl,
    make_pod,
    own_cluster,
    pods_in,
    unavailable,
    wait_for,
)

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
CHART = DEPLOY / "helm" / "ksched"
NAMESPACE = "ksched-system"
UPGRADE_TAG = "ksched:test-upgrade"
LEASE_S = 15.0  # deploy/configmap.yaml's leaseDuration, which the chart shares
REAL = {realnode.NODE_LABEL: "true"}
KWOK = {"type": "kwok"}


@dataclass
class RealCluster:
    state: local.ClusterState
    kube: Kube
    images: tuple[str, str]
    figures: dict[str, float] = field(default_factory=dict)

    def kubectl(self, *args: str, input_: str | None = None) -> subprocess.CompletedProcess[str]:
        return kubectl(self.state, *args, input_=input_)


@pytest.fixture(scope="module")
def real(
    tmp_path_factory: pytest.TempPathFactory, image: tuple[image_build.BuildResult, float]
) -> Iterator[RealCluster]:
    if os.geteuid() != 0:
        unavailable("real nodes need root")
    built, build_s = image
    builder = built.builder
    tags = (built.tag, UPGRADE_TAG)
    try:
        ensure_built()
        if builder == "docker":
            run(["docker", "tag", built.tag, UPGRADE_TAG], "tagging the upgrade's image")
        else:
            container = run(
                ["buildah", "from", "--pull=never", built.tag], "starting the upgrade's image"
            ).strip()
            run(["buildah", "config", "--label", "ksched.io/test=upgrade", container], "labelling it")
            run(
                ["buildah", "commit", "--quiet", "--rm", container, UPGRADE_TAG],
                "committing the upgrade's image",
            )
    except (BuildError, ImageError) as err:
        unavailable(str(err))
        raise
    with own_cluster(tmp_path_factory.mktemp("real-cluster")):
        started = time.monotonic()
        state = local.up(
            nodes=4, zones=2, real_nodes=1, with_scheduler=True, with_controllers=True, prometheus_targets=""
        )
        up_s = time.monotonic() - started
        images = []
        with tempfile.TemporaryDirectory(prefix="ksched-image-") as folder:
            for tag in tags:
                archive, ref = image_build.export_archive(builder, tag, Path(folder))
                local.load_image(archive, image_build.containerd_name(ref))
                images.append(ref)
        kube = Kube(load_configuration(state.kubeconfig, 16))
        yield RealCluster(state, kube, (images[0], images[1]), {"image build s": build_s, "up s": up_s})


# --- what every install must do ------------------------------------------------------------


def ksched_pods(real: RealCluster) -> list[Obj]:
    pods = pods_in(real.kube, NAMESPACE)
    return [p for p in pods if (p["metadata"].get("labels") or {}).get("app.kubernetes.io/name") == "ksched"]


def ready(pod: Obj) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def wait_ready(real: RealCluster, image: str, count: int = 2, timeout: float = 120) -> list[Obj]:
    def done() -> list[Obj] | None:
        pods = [p for p in ksched_pods(real) if not p["metadata"].get("deletionTimestamp")]
        running = [p for p in pods if p["spec"]["containers"][0]["image"] == image and ready(p)]
        return running if len(running) == count == len(pods) else None

    pods = wait_for(done, timeout, 0.5)
    assert pods, real.kubectl("-n", NAMESPACE, "describe", "pods").stdout[-4000:]
    return list(pods)


def leader(real: RealCluster) -> str:
    got = real.kube.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/ksched")
    if got.status != 200:
        return ""
    holder = (got.json().get("spec") or {}).get("holderIdentity") or ""
    return str(holder).split("_")[0]


def pod(name: str, namespace: str, node_selector: dict[str, str], **spec: Any) -> Obj:
    """helpers.make_pod on ``node_selector``, running the pause image (present on every real
    node, never pulled), gone at once when deleted."""
    made = make_pod(
        name, namespace, "10m", "16Mi", nodeSelector=node_selector, terminationGracePeriodSeconds=0, **spec
    )
    made["spec"]["containers"][0] |= {"image": realnode.PAUSE_IMAGE, "imagePullPolicy": "Never"}
    return made


def namespace(real: RealCluster, name: str, labels: dict[str, str] | None = None) -> str:
    metadata: dict[str, Any] = {"name": name, "labels": labels or {}}
    create(real.kube, [{"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}])
    # Real pods need their ServiceAccount, which the controller makes a moment later.
    assert wait_for(
        lambda: real.kube.request("GET", f"/api/v1/namespaces/{name}/serviceaccounts/default").status == 200,
        30,
    )
    return name


def scheduled_by(real: RealCluster, ns: str) -> Counter[str]:
    """How many Scheduled events each pod of ``ns`` got, and from whom, as ``pod by controller``."""
    events = real.kube.request("GET", f"/apis/events.k8s.io/v1/namespaces/{ns}/events").json()["items"]
    return Counter(
        f"{e['regarding']['name']} by {e.get('reportingController') or '?'}"
        for e in events
        if e.get("reason") == "Scheduled"
    )


def get_pod(real: RealCluster, ns: str, name: str) -> Obj:
    got: Obj = real.kube.request("GET", f"/api/v1/namespaces/{ns}/pods/{name}").json()
    return got


def running_on(real: RealCluster, ns: str, name: str, node: str) -> bool:
    p = get_pod(real, ns, name)
    statuses = (p.get("status") or {}).get("containerStatuses") or []
    return (
        p["spec"].get("nodeName") == node and bool(statuses) and "running" in (statuses[0].get("state") or {})
    )


def service_address(real: RealCluster) -> str:
    svc = real.kube.request("GET", f"/api/v1/namespaces/{NAMESPACE}/services/ksched").json()
    return f"{svc['spec']['clusterIP']}:10259"


def ksched_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ksched.commands.cli", *args], capture_output=True, text=True, check=False
    )


def unverified() -> ssl.SSLContext:
    """ksched's serving certificate is the self-signed one it generates at start."""
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    return context


def metrics_reader(real: RealCluster, tmp_path: Path, tag: str) -> tuple[str, Path]:
    """A ServiceAccount bound to the installed ClusterRole ksched-metrics-reader: its token,
    and a kubeconfig that presents it."""
    name = f"{tag}-metrics-reader"
    account = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": name, "namespace": NAMESPACE},
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "ksched-metrics-reader",
        },
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}],
    }
    for doc in (account, binding):
        applied = real.kubectl("apply", "-f", "-", input_=json.dumps(doc))
        assert applied.returncode == 0, applied.stderr
    kubeconfig = tmp_path / f"{name}.kubeconfig"
    token = service_account_kubeconfig(
        real.kube, Path(real.state.kubeconfig), (NAMESPACE, name), 3600, kubeconfig
    )
    return token, kubeconfig


def assert_serves(real: RealCluster, image: str, tag: str, tmp_path: Path) -> None:
    """The checks every install must pass, on pods in a namespace named after ``tag``."""
    pods = wait_ready(real, image)
    names = {p["metadata"]["name"] for p in pods}
    assert wait_for(lambda: leader(real) in names, LEASE_S * 2, 0.5), f"no ksched pod of {names} leads"
    # The ServiceAccount's token through the `kubernetes` Service: the informers synced. The
    # leader logs its term on a thread of its own once its Lease write has returned.
    wait_for(
        lambda: "became the leader" in real.kubectl("-n", NAMESPACE, "logs", leader(real)).stdout, 10, 0.5
    )
    logs = real.kubectl("-n", NAMESPACE, "logs", leader(real))
    assert "became the leader" in logs.stdout, logs.stdout[-3000:] + logs.stderr

    ns = namespace(real, f"{tag}-pods")
    create(
        real.kube,
        [pod("on-real-0", ns, REAL), *(pod(f"on-kwok-{i}", ns, KWOK) for i in range(3))],
    )
    assert wait_for(lambda: running_on(real, ns, "on-real-0", "real-node-0"), 60, 0.5), get_pod(
        real, ns, "on-real-0"
    ).get("status")
    on_kwok = wait_for(
        lambda: all(get_pod(real, ns, f"on-kwok-{i}")["spec"].get("nodeName") for i in range(3)), 30, 0.5
    )
    assert on_kwok
    for i in range(3):
        assert get_pod(real, ns, f"on-kwok-{i}")["spec"]["nodeName"].startswith("kwok-node-")
    wait_for(lambda: scheduled_by(real, ns).total() >= 4, 30, 0.5)
    assert scheduled_by(real, ns) == Counter(
        [f"{n} by ksched" for n in ("on-real-0", "on-kwok-0", "on-kwok-1", "on-kwok-2")]
    ), scheduled_by(real, ns)

    # The webhook behind its Service routes a pod of an opted-in namespace to ksched.
    # Until the API server reaches it (kube-proxy has programmed the Service's new endpoints),
    # failurePolicy Ignore leaves pods with default-scheduler: that is allowed for a moment only.
    routed = namespace(real, f"{tag}-routed", {"ksched.io/route": "true"})
    tries = iter(range(1000))

    def routes() -> str | None:
        plain = pod(f"routed-{next(tries)}", routed, REAL)
        del plain["spec"]["schedulerName"]
        got = real.kube.request("POST", f"/api/v1/namespaces/{routed}/pods", body=plain).json()
        return str(got["metadata"]["name"]) if got["spec"]["schedulerName"] == "ksched" else None

    first = wait_for(routes, 20, 1.0)
    assert first, "the webhook routed no pod in 20 s"
    assert routes(), "the webhook routed one pod but not the next"
    assert wait_for(lambda: running_on(real, routed, first, "real-node-0"), 60, 0.5)

    # /metrics and /status through the Service (kube-proxy's rules on this host), over HTTPS
    # as a ServiceAccount bound to ksched-metrics-reader, as Prometheus reads them.
    address = service_address(real)
    token, kubeconfig = metrics_reader(real, tmp_path, tag)
    request = urllib.request.Request(
        f"https://{address}/metrics", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=5, context=unverified()) as response:
        metrics = response.read().decode()
    assert "ksched_schedule_attempts_total" in metrics
    status = ksched_cli(
        "status",
        "--address",
        address,
        "--kubeconfig",
        str(kubeconfig),
        "--insecure-skip-tls-verify",
        "-o",
        "json",
    )
    assert status.returncode == 0, status.stderr
    # Either replica answers through the Service; both name the leader.
    doc = json.loads(status.stdout)
    assert doc["synced"] and str(doc["leader"]).split("_")[0] == leader(real), doc

    # A live explain, with the configuration the pods run, places as they placed.
    config = tmp_path / f"{tag}-config.yaml"
    cm = real.kube.request("GET", f"/api/v1/namespaces/{NAMESPACE}/configmaps/ksched-config").json()
    config.write_text(cm["data"]["config.yaml"])
    waiting = pod("explained-0", ns, REAL, schedulerName="nobody")
    create(real.kube, [waiting])
    explained = ksched_cli(
        "explain", f"{ns}/explained-0", "--config", str(config), "--kubeconfig", real.state.kubeconfig
    )
    assert explained.returncode == 0, explained.stdout + explained.stderr
    assert explained.stdout.startswith(f"pod {ns}/explained-0: placed on real-node-0 "), explained.stdout


# --- arrivals at a steady rate, and what they must show ---------------------------------------


class Arrivals:
    """Pods created at ``rate`` a second on KWOK nodes until stopped."""

    def __init__(self, real: RealCluster, ns: str, rate: float = 4.0):
        self.real, self.ns, self.rate = real, ns, rate
        self.created: dict[str, str] = {}
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Arrivals:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            name = f"arrival-{i}"
            got = self.real.kube.request(
                "POST", f"/api/v1/namespaces/{self.ns}/pods", body=pod(name, self.ns, KWOK)
            )
            if got.status == 201:
                self.created[name] = got.json()["metadata"]["uid"]
            else:
                self.errors.append(f"{name}: {got.status}")
            i += 1
            self._stop.wait(1 / self.rate)

    def assert_all_bound_once(self, timeout: float = 60) -> float:
        """Every created pod is there, bound, with one Scheduled event; returns the longest wait."""

        def bound() -> list[Obj] | None:
            pods = [
                p for p in pods_in(self.real.kube, self.ns) if p["metadata"]["name"].startswith("arrival-")
            ]
            return (
                pods
                if len(pods) >= len(self.created) and all(p["spec"].get("nodeName") for p in pods)
                else None
            )

        pods = wait_for(bound, timeout, 1.0)
        assert pods, (
            f"pods left unbound: {[p['metadata']['name'] for p in pods_in(self.real.kube, self.ns) if not p['spec'].get('nodeName')]}"
        )
        assert not self.errors, self.errors
        uids = {p["metadata"]["uid"] for p in pods}
        assert not [n for n, uid in self.created.items() if uid not in uids], "pods lost"
        # The last binds' Scheduled events are posted by ksched's writers after the binds.
        expected = {f"{n} by ksched" for n in self.created}
        wait_for(lambda: expected <= set(scheduled_by(self.real, self.ns)), 30, 0.5)
        counts = scheduled_by(self.real, self.ns)
        twice = {k: v for k, v in counts.items() if v != 1}
        assert not twice, f"bound more than once: {twice}"
        assert set(counts) == {f"{n} by ksched" for n in self.created}, counts
        waits = [_seconds(_scheduled_at(p)) - _seconds(p["metadata"]["creationTimestamp"]) for p in pods]
        return max(waits)


def _scheduled_at(p: Obj) -> str:
    (condition,) = [c for c in p["status"]["conditions"] if c["type"] == "PodScheduled"]
    return str(condition["lastTransitionTime"])


def _seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


# --- the kustomize base -------------------------------------------------------------------------


def overlay(tmp_path: Path, image: str) -> Path:
    """deploy/ with the image built here swapped in, never pulled, and ksched's pods kept on
    the real node (a KWOK node would only pretend to run them)."""
    folder = tmp_path / "overlay"
    folder.mkdir(exist_ok=True)
    name, tag = image.rsplit(":", 1)
    (folder / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [os.path.relpath(DEPLOY, folder)],
                "images": [{"name": "ksched", "newName": name, "newTag": tag}],
                "patches": [
                    {
                        "target": {"kind": "Deployment", "name": "ksched"},
                        "patch": yaml.safe_dump(
                            [
                                {
                                    "op": "add",
                                    "path": "/spec/template/spec/containers/0/imagePullPolicy",
                                    "value": "Never",
                                },
                                {"op": "add", "path": "/spec/template/spec/nodeSelector", "value": REAL},
                            ]
                        ),
                    }
                ],
            }
        )
    )
    return folder


def test_kustomize_base_runs_on_a_real_node_survives_its_leader_and_an_upgrade(
    real: RealCluster, tmp_path: Path
) -> None:
    first, second = real.images
    folder = overlay(tmp_path, first)
    started = time.monotonic()
    applied = real.kubectl("apply", "-k", str(folder))
    assert applied.returncode == 0, applied.stderr
    wait_ready(real, first)
    ready_s = time.monotonic() - started
    assert_serves(real, first, "kustomize", tmp_path)

    # The leader dies while pods arrive: the other replica leads within the lease duration.
    ns = namespace(real, "failover")
    with Arrivals(real, ns) as failover:
        time.sleep(3)
        old = leader(real)
        killed = time.monotonic()
        deleted = real.kubectl("-n", NAMESPACE, "delete", "pod", old, "--wait=false")
        assert deleted.returncode == 0, deleted.stderr
        took = wait_for(
            lambda: (h := leader(real)) and h != old and time.monotonic() - killed, LEASE_S * 2, 0.2
        )
        assert took, f"no new leader {LEASE_S * 2:.0f} s after {old} was deleted"
        time.sleep(5)
    failover_wait = failover.assert_all_bound_once()
    assert took <= LEASE_S, f"the new leader took {took:.1f} s (lease {LEASE_S:.0f} s)"

    # A rolling upgrade to the second tag while pods arrive.
    wait_ready(real, first)
    ns = namespace(real, "upgrade")
    with Arrivals(real, ns) as arrivals:
        time.sleep(3)
        started = time.monotonic()
        real.kubectl("-n", NAMESPACE, "set", "image", "deployment/ksched", f"ksched={second}")
        rolled = real.kubectl("-n", NAMESPACE, "rollout", "status", "deployment/ksched", "--timeout=180s")
        upgrade_s = time.monotonic() - started
        assert rolled.returncode == 0, rolled.stdout + rolled.stderr
        wait_ready(real, second)
        time.sleep(5)
    upgrade_wait = arrivals.assert_all_bound_once()
    assert upgrade_wait <= LEASE_S, f"a pod waited {upgrade_wait:.1f} s to be bound (lease {LEASE_S:.0f} s)"
    print(
        f"\nkustomize: image build {real.figures['image build s']:.0f} s, up {real.figures['up s']:.1f} s, "
        f"apply to 2 Ready {ready_s:.1f} s, leader deleted to new leader {took:.1f} s "
        f"(longest wait {failover_wait:.1f} s), rolling upgrade {upgrade_s:.1f} s "
        f"(longest wait {upgrade_wait:.1f} s); {len(arrivals.created)} pods arrived during the upgrade"
    )
    deleted = real.kubectl("delete", "-k", str(folder), "--wait=true", "--timeout=120s")
    assert deleted.returncode == 0, deleted.stderr
    assert wait_for(lambda: not ksched_pods(real), 60, 0.5)


# --- the chart ----------------------------------------------------------------------------------


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(helm_binary()), *args], capture_output=True, text=True, check=False)


def helm_install(real: RealCluster, image: str, *values: str) -> float:
    name, tag = image.rsplit(":", 1)
    started = time.monotonic()
    done = helm(
        "install",
        "ksched",
        str(CHART),
        "--kubeconfig",
        real.state.kubeconfig,
        "--namespace",
        NAMESPACE,
        "--create-namespace",
        "--set",
        f"image.repository={name}",
        "--set",
        f"image.tag={tag}",
        "--set",
        "image.pullPolicy=Never",
        "--set-string",
        f"nodeSelector.{realnode.NODE_LABEL.replace('.', chr(92) + '.')}=true",
        *values,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    wait_ready(real, image)
    return time.monotonic() - started


def helm_uninstall(real: RealCluster) -> None:
    done = helm(
        "uninstall", "ksched", "--kubeconfig", real.state.kubeconfig, "--namespace", NAMESPACE, "--wait"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert wait_for(lambda: not ksched_pods(real), 60, 0.5)


def test_chart_runs_on_a_real_node(real: RealCluster, tmp_path: Path) -> None:
    first = real.images[0]
    ready_s = helm_install(real, first)
    assert_serves(real, first, "chart", tmp_path)
    print(f"\nchart: install to 2 Ready {ready_s:.1f} s")
    helm_uninstall(real)


def test_chart_in_shadow_mode_binds_nothing_on_the_real_node(real: RealCluster) -> None:
    first = real.images[0]
    helm_install(real, first, "--set", "shadow.enabled=true")
    ns = namespace(real, "shadow-pods")
    # A pod asking for ksched stays pending; one default-scheduler binds is recorded.
    create(
        real.kube,
        [pod("asks-ksched-0", ns, REAL), pod("default-0", ns, REAL, schedulerName="default-scheduler")],
    )
    assert wait_for(lambda: running_on(real, ns, "default-0", "real-node-0"), 60, 0.5)
    # The admin's kubeconfig (system:masters) reads /shadow; the certificate is self-signed.
    admin = (
        "--address",
        service_address(real),
        "--kubeconfig",
        real.state.kubeconfig,
        "--insecure-skip-tls-verify",
    )

    def recorded() -> dict[str, Any] | None:
        report = ksched_cli("shadow", "report", *admin, "-o", "json")
        if report.returncode != 0:
            return None
        doc: dict[str, Any] = json.loads(report.stdout)
        return doc if (doc.get("total") or 0) >= 1 else None

    report = wait_for(recorded, 30, 1.0)
    assert report, ksched_cli("shadow", "report", *admin).stdout
    time.sleep(5)
    waiting = get_pod(real, ns, "asks-ksched-0")
    assert not waiting["spec"].get("nodeName"), "shadow mode bound a pod"
    assert not [k for k in scheduled_by(real, ns) if k.endswith("by ksched")]
    helm_uninstall(real)


# --- metrics from a real kubelet -----------------------------------------------------------------

# A ksched metric on the real kubelet's resource metrics, as Prometheus scrapes them: the cores
# the node uses.
NODE_CORES = {
    "name": "cores",
    "source": "prometheus",
    "query": f'sum by (node) (rate(node_cpu_usage_seconds_total{{job="{realnode.KUBELET_JOB}"}}[20s]))',
    "prefer": "lower",
}


def test_a_metric_on_the_real_kubelet_reads_the_node_and_moves_with_its_load(real: RealCluster) -> None:
    config = parse_config(
        {
            "apiVersion": "ksched.io/v1alpha1",
            "kind": "KschedConfiguration",
            "metrics": [NODE_CORES],
            "prometheus": {"url": real.state.prometheus},
        }
    )
    assert real.state.prometheus
    (metric,) = config.metrics
    source = PrometheusSource(real.state.prometheus)
    nodes = real.kube.request("GET", "/api/v1/nodes").json()["items"]

    def cores() -> float | None:
        return source.query(metric, NodeResolver(nodes)).values.get("real-node-0")

    assert wait_for(lambda: cores() is not None, 60, 1.0), "no value for real-node-0"
    time.sleep(20)  # a whole rate window of the idle node
    idle = cores()
    assert idle is not None
    ns = namespace(real, "burn")
    burner = pod("burn-0", ns, REAL, schedulerName="default-scheduler")
    burner["spec"]["containers"][0] |= {
        "image": real.images[0],
        "command": ["python3", "-c", "while True: pass"],
        "resources": {"requests": {"cpu": "500m", "memory": "64Mi"}},
    }
    create(real.kube, [burner])
    assert wait_for(lambda: running_on(real, ns, "burn-0", "real-node-0"), 60, 0.5)
    busy = wait_for(lambda: (c := cores()) is not None and c >= idle + 0.5 and c, 60, 2.0)
    print(f"\nreal-node-0 uses {idle:.2f} cores idle, {busy or cores():.2f} with a pod burning one core")
    assert busy, f"real-node-0's value did not move: {idle:.2f} cores idle, {cores()} with the pod burning"
