"""What the quality harness reads from and writes to the cluster: the pods it creates (at a
rate, or all at once), the wait until they are settled, the scheduler configuration it
hands to ``ksched run``, and the node utilisation Prometheus recorded.

Owns the cluster I/O that :mod:`.run` (one scheduler at a time on every node) and
:mod:`.pooled` (every scheduler at once, each on a pool of its own) share.
"""

from __future__ import annotations

import json
import math
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import yaml

from ksched.bench.pods import CREATE_WORKERS, create_object, create_pods, patch_object
from ksched.bench.quality.figures import Series
from ksched.bench.quality.scenarios import Scenario, controllers
from ksched.cluster import local
from ksched.cluster.load import SCRAPE_JOB, LoadSimulation
from ksched.errors import KschedError
from ksched.loop.client import Kube
from ksched.objects import Obj

UTILISATION = "node:node_cpu_utilisation:ratio"
SETTLE_TIMEOUT_S = 300.0
# A cluster counts as cool again once no node's recorded utilisation is this far above what
# the idle cluster recorded (its nodes' own system usage).
COOL_MARGIN = 0.02
COOL_TIMEOUT_S = 300.0


def ksched_config(path: Path | None, prometheus: str, scheduler_name: str | None = None) -> Obj:
    """A ksched configuration from ``path`` (None: no metric) pointed at ``prometheus``, its
    one profile renamed to ``scheduler_name`` where given (so several ksched processes can
    share a cluster, each placing the pods that ask for it)."""
    config: Obj = {"apiVersion": "ksched.io/v1alpha1", "kind": "KschedConfiguration"}
    if path is not None:
        if not path.exists():
            raise KschedError(f"no ksched configuration at {path}: pass --ksched-config")
        config = yaml.safe_load(path.read_text())
        config["prometheus"] = {**(config.get("prometheus") or {}), "url": prometheus}
    if scheduler_name is not None:
        profiles = config.get("profiles") or [{}]
        if len(profiles) != 1:
            raise KschedError(f"{path}: the quality harness runs a configuration with one profile")
        config["profiles"] = [{**profiles[0], "schedulerName": scheduler_name}]
    return config


def utilisation(prometheus: str, start: float, end: float, step: float) -> Series:
    """Every node's recorded CPU utilisation from ``start`` to ``end``, one sample a step."""
    query = urllib.parse.urlencode({"query": UTILISATION, "start": start, "end": end, "step": step})
    with urllib.request.urlopen(f"{prometheus}/api/v1/query_range?{query}", timeout=30) as r:
        body = json.loads(r.read())
    if body.get("status") != "success":
        raise KschedError(f"Prometheus answered {body.get('error') or body}")
    times = [start + i * step for i in range(int((end - start) // step) + 1)]
    values: list[dict[str, float]] = [{} for _ in times]
    for result in body["data"]["result"]:
        node = result["metric"].get("node", "")
        for ts, v in result["values"]:
            i = round((float(ts) - start) / step)
            if 0 <= i < len(values) and math.isfinite(float(v)):
                values[i][node] = float(v)
    return Series(times, values, step)


def _scalar(prometheus: str, query: str) -> float:
    """The first value of an instant query that aggregates to one series (0.0 for none)."""
    encoded = urllib.parse.urlencode({"query": query})
    with urllib.request.urlopen(f"{prometheus}/api/v1/query?{encoded}", timeout=30) as r:
        result = json.loads(r.read()).get("data", {}).get("result") or []
    return float(result[0]["value"][1]) if result else 0.0


def hottest(prometheus: str) -> float:
    """The highest utilisation Prometheus holds for any node now (0.0 for none)."""
    return _scalar(prometheus, f"max({UTILISATION})")


def forget_deleted_pods(prometheus: str, nodes: int, poll_s: float) -> None:
    """Restart KWOK, so that the pods just deleted stop using CPU on their nodes, and wait
    until Prometheus scrapes every node again and records its utilisation.

    KWOK v0.8.0's metrics keep evaluating pods that were deleted while its pod-delete stage
    lagged behind (its own delete then fails with NotFound and the pod stays in the cache it
    serves metrics from): after one quality round, every one of the 1,488 pods of a pool was
    still served five minutes after its namespace was emptied, and the next scenario began
    on nodes that looked busy. A restarted KWOK lists the pods afresh; while it starts, its
    service discovery can answer with no target, and Prometheus then scraped nothing for up
    to six minutes (a whole scenario with no samples), hence the wait for scrapes made after
    the restart."""
    since = time.time()
    local.restart("kwok")
    up = f'up{{job="{SCRAPE_JOB}"}}'
    deadline = time.monotonic() + COOL_TIMEOUT_S
    while time.monotonic() < deadline:
        # Scrapes of the restarted KWOK: those from before it still read 1 for a while.
        if (
            _count(prometheus, f"({up} == 1) and (timestamp({up}) > {since:.3f})") >= nodes
            and _count(prometheus, UTILISATION) >= nodes
        ):
            return
        time.sleep(poll_s)
    raise KschedError(
        f"Prometheus did not scrape all {nodes} nodes again within {COOL_TIMEOUT_S:.0f} s of KWOK's restart"
    )


def _count(prometheus: str, selector: str) -> int:
    return int(_scalar(prometheus, f"count({selector})"))


def cool_down(prometheus: str, idle: float, poll_s: float) -> float:
    """Wait until no node is recorded more than :data:`COOL_MARGIN` above ``idle`` (the idle
    cluster's :func:`hottest`), so the next run starts cool; the seconds waited (up to
    :data:`COOL_TIMEOUT_S`, then it goes on regardless)."""
    began = time.monotonic()
    while time.monotonic() - began < COOL_TIMEOUT_S and hottest(prometheus) > idle + COOL_MARGIN:
        time.sleep(poll_s)
    return time.monotonic() - began


def idle_utilisation(prometheus: str, poll_s: float, lag_s: float) -> float:
    """What the idle cluster's hottest node records, once the recording rule has a value for
    every node: the floor :func:`cool_down` waits for."""
    deadline = time.monotonic() + COOL_TIMEOUT_S
    time.sleep(lag_s)
    value = hottest(prometheus)
    while value == 0.0 and time.monotonic() < deadline:
        time.sleep(poll_s)
        value = hottest(prometheus)
    return value


def metric_lag_s(scrape_interval_s: float) -> float:
    """How long after a pod starts the recorded utilisation shows it fully: the rate window,
    one scrape, one recording-rule evaluation."""
    return LoadSimulation(scrape_interval_s).rate_window_s + 2 * scrape_interval_s


@dataclass
class Arrivals:
    """What a scenario's creation did: name -> UID, and when each part of it began (the
    steady part, then the burst if any), by the wall clock."""

    created: dict[str, str]
    starts: list[tuple[float, list[str]]]
    # When the last create returned.
    ended: float = 0.0

    def pods_per_s(self, pods: list[Obj]) -> float:
        """Pods bound per second of placing: each part from its first create to its last bind
        (the bind time of the pod's PodScheduled condition, to the second)."""
        bound = {p["metadata"]["name"]: t for p in pods if (t := bind_time(p)) is not None}
        busy = 0.0
        for began, names in self.starts:
            times = [bound[n] for n in names if n in bound]
            if times:
                busy += max(max(times) - began, 1.0)
        return round(len(bound) / busy, 1) if busy else 0.0


def bind_waits(pods: list[Obj], now: float) -> list[float]:
    """Create to bind of each pod (seconds; both times to the second); a pod not bound counts
    its wait until ``now`` (at least that long)."""
    out = []
    for p in pods:
        created = p["metadata"].get("creationTimestamp")
        if created:
            made = datetime.fromisoformat(str(created).replace("Z", "+00:00")).timestamp()
            bound = bind_time(p)
            out.append(max(0.0, (now if bound is None else bound) - made))
    return out


def bind_time(pod: Obj) -> float | None:
    """When the pod was bound (its PodScheduled=True condition), None if it is not."""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "True" and c.get("lastTransitionTime"):
            return datetime.fromisoformat(str(c["lastTransitionTime"]).replace("Z", "+00:00")).timestamp()
    return None


class StoppedError(KschedError):
    """The round was stopped (Ctrl-C, SIGTERM, or another pool's creator failed) while a
    scenario's pods were still to be created."""


def pause(seconds: float, stop: threading.Event | None = None) -> None:
    """Sleep ``seconds``; with ``stop``, raise StoppedError as soon as it is set instead (a
    thread creating a scenario's pods over minutes cannot be interrupted otherwise)."""
    if stop is None:
        if seconds > 0:
            time.sleep(seconds)
    elif stop.wait(max(0.0, seconds)):
        raise StoppedError("stopped before the scenario's pods were all created")


def create_scenario(kube: Kube, s: Scenario, lag_s: float, stop: threading.Event | None = None) -> Arrivals:
    """Create the scenario's pods at its rate, or workload by workload at their times; its
    burst, if any, all at once ``lag_s`` after the others (the time the metric needs to show
    them). Where controllers own the pods, each workload's ReplicaSet makes them when the
    workload arrives (:func:`_made_by_controllers`). Then its herd, if any: ``lag_s`` later
    its workload's ReplicaSet scaled at once. Each wait ends early with StoppedError once
    ``stop`` is set."""
    if s.controlled:
        arrivals = _made_by_controllers(kube, s, stop)
    elif s.arrivals is not None:
        arrivals = _create_over_minutes(kube, s, stop)
    else:
        steady = s.pods if s.burst_from is None else s.pods[: s.burst_from]
        began = time.time()
        arrivals = Arrivals(
            create(kube, steady, s.rate, stop), [(began, [p["metadata"]["name"] for p in steady])]
        )
        if s.burst_from is not None:
            pause(lag_s, stop)
            burst = s.pods[s.burst_from :]
            began = time.time()
            arrivals.created |= create(kube, burst, None)
            arrivals.starts.append((began, [p["metadata"]["name"] for p in burst]))
        arrivals.ended = time.time()
    if s.scale_up is not None:
        pause(lag_s, stop)
        _scale_up(kube, s, arrivals, stop)
    return arrivals


def _create_over_minutes(kube: Kube, s: Scenario, stop: threading.Event | None) -> Arrivals:
    """Each workload's pods at once at its time."""
    assert s.arrivals is not None
    arrivals = Arrivals({}, [])
    begin = time.time()
    for a in s.arrivals:
        group = s.pods[a.first : a.first + a.count]
        pause(begin + a.at_s - time.time(), stop)
        began = time.time()
        arrivals.created |= create(kube, group, None)
        arrivals.starts.append((began, [p["metadata"]["name"] for p in group]))
    arrivals.ended = time.time()
    return arrivals


def _made_by_controllers(kube: Kube, s: Scenario, stop: threading.Event | None) -> Arrivals:
    """A controlled scenario's pods, made as a Deployment's are: each workload's ReplicaSet
    (and PodDisruptionBudget, :func:`controllers`) is created when the workload arrives (at
    its time, or at its first pod's turn at the scenario's rate) and kube-controller-manager
    makes its pods from the template, so they are owned from their creation, and every
    scheduler's default topology spreading and ksched's per-workload estimate see them as
    one workload when they are placed. The scenario's pods stand for what is made: a
    workload's differ only by name. Workloads arriving over minutes are a part each; at the
    rate, the scenario is one part. (No controlled scenario has a burst.)"""
    assert s.burst_from is None, "a controlled scenario's burst is not made by its controllers"
    if not s.pods:
        return Arrivals({}, [], time.time())
    app_of = [p["metadata"]["labels"]["app"] for p in s.pods]
    if s.arrivals is not None:
        times = [(a.at_s, app_of[a.first]) for a in s.arrivals]
    else:
        firsts: dict[str, int] = {}
        for i, app in enumerate(app_of):
            firsts.setdefault(app, i)
        times = [(i / s.rate if s.rate else 0.0, app) for app, i in firsts.items()]
    owners: dict[str, list[Obj]] = {}
    for obj in controllers(s.pods):
        owners.setdefault(obj["metadata"]["name"], []).append(obj)
    made: list[tuple[float, str]] = []
    begin = time.time()
    for at_s, app in times:
        pause(begin + at_s - time.time(), stop)
        made.append((time.time(), app))
        for obj in owners[app]:
            _create(kube, obj)
    by_app = _made_by(kube, s.pods[0]["metadata"]["namespace"], None, len(s.pods), {}, stop)
    arrivals = Arrivals({}, [])
    for began, app in made:
        pods = by_app.get(app, {})
        arrivals.created |= pods
        if s.arrivals is not None:
            arrivals.starts.append((began, list(pods)))
    if s.arrivals is None:
        arrivals.starts.append((begin, list(arrivals.created)))
    arrivals.ended = time.time()
    return arrivals


def _made_by(
    kube: Kube,
    namespace: str,
    app: str | None,
    count: int,
    known: dict[str, str],
    stop: threading.Event | None,
) -> dict[str, dict[str, str]]:
    """Wait (up to :data:`SETTLE_TIMEOUT_S`) until the namespace has ``count`` pods of the
    workload ``app`` (None: of any), as controllers make them; the ones not in ``known``,
    name -> UID, by their workload (``app`` label)."""
    query = {} if app is None else {"labelSelector": f"app={app}"}
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while True:
        pods = kube.request("GET", f"/api/v1/namespaces/{namespace}/pods", query=query).json()["items"]
        if len(pods) >= count or time.monotonic() > deadline:
            break
        pause(0.5, stop)
    out: dict[str, dict[str, str]] = {}
    for p in pods:
        m = p["metadata"]
        if m["name"] not in known:
            out.setdefault(str((m.get("labels") or {}).get("app")), {})[m["name"]] = m["uid"]
    return out


def _scale_up(kube: Kube, s: Scenario, arrivals: Arrivals, stop: threading.Event | None) -> None:
    """Scale the herd's ReplicaSet at once and wait until its controller has made the pods;
    they join ``arrivals`` as a part of their own."""
    assert s.scale_up is not None
    app, replicas = s.scale_up
    namespace = s.pods[0]["metadata"]["namespace"]
    began = time.time()
    patch_object(kube, f"{_collection('ReplicaSet', namespace)}/{app}", {"spec": {"replicas": replicas}})
    made = _made_by(kube, namespace, app, replicas, arrivals.created, stop).get(app, {})
    arrivals.created |= made
    arrivals.starts.append((began, list(made)))
    arrivals.ended = time.time()


# Where each kind of controller object the scenarios create is posted, under its namespace.
_COLLECTIONS = {"ReplicaSet": "/apis/apps/v1", "PodDisruptionBudget": "/apis/policy/v1"}


def _collection(kind: str, namespace: str) -> str:
    return f"{_COLLECTIONS[kind]}/namespaces/{namespace}/{kind.lower()}s"


def _create(kube: Kube, obj: Obj) -> None:
    create_object(kube, _collection(obj["kind"], obj["metadata"]["namespace"]), obj)


def clear_controllers(kube: Kube, namespace: str) -> None:
    """Delete the namespace's ReplicaSets and PodDisruptionBudgets, so that clearing its pods
    is not undone by a ReplicaSet re-creating them."""
    for kind in _COLLECTIONS:
        kube.request(
            "DELETE",
            _collection(kind, namespace),
            query={"propagationPolicy": "Background"},
            timeout=SETTLE_TIMEOUT_S,
        )


def observation_end(start: float, arrivals: list[Arrivals], observe_s: float, lag_s: float) -> float:
    """The end of what is judged: ``observe_s`` after the first create, and at least until the
    metric has shown the last arrivals for the same time again."""
    return max(start + observe_s, *(a.ended + 2 * lag_s for a in arrivals))


def create(
    kube: Kube, pods: list[Obj], rate: float | None, stop: threading.Event | None = None
) -> dict[str, str]:
    """Create the pods all at once (``rate`` None) or at ``rate`` a second (each wait ends
    early with StoppedError once ``stop`` is set); name -> UID."""
    if rate is None:
        return create_pods(kube, pods)
    created: dict[str, str] = {}
    begin = time.monotonic()
    batch = max(1, min(CREATE_WORKERS, int(rate)))
    for i in range(0, len(pods), batch):
        pause(begin + i / rate - time.monotonic(), stop)
        created |= create_pods(kube, pods[i : i + batch])
    return created


def reported(pod: Obj) -> bool:
    """The pod carries the scheduler's Unschedulable verdict."""
    return any(
        c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


class VoidRoundError(KschedError):
    """A round that cannot be judged: one of its schedulers ended while its pods waited."""


def settle(
    kube: Kube, namespace: str, dead: Callable[[], str | None] = lambda: None
) -> tuple[list[Obj], float]:
    """Until every pod is bound or reported unschedulable; the pods, and when that was. Raises
    VoidRoundError at once where ``dead`` says why a scheduler of the round has ended (its pods
    would wait for no one: the round is void, not slow)."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while True:
        why = dead()
        if why is not None:
            raise VoidRoundError(f"waiting for the pods of {namespace}: {why}")
        pods = kube.request("GET", f"/api/v1/namespaces/{namespace}/pods").json()["items"]
        waiting = [p for p in pods if not p["spec"].get("nodeName") and not reported(p)]
        if not waiting or time.monotonic() > deadline:
            return pods, time.time()
        time.sleep(0.5)


def create_namespace(kube: Kube, namespace: str) -> None:
    r = kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": namespace}})
    if not r.ok:
        raise KschedError(f"creating namespace {namespace}: HTTP {r.status}: {r.data[:200]!r}")
