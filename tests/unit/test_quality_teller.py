"""oracle-measured's teller: each bound pod is told its steady usage one scrape after its
bind, never before, and once."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from ksched.bench.quality.run import EXAMPLE_CONFIG, POOLED_SETUPS, QualityOptions, _config_of
from ksched.bench.quality.scenarios import EXPECTED_CPU, scenario
from ksched.bench.quality.teller import EARLY_S, ORACLE_MEASURED, Teller, due
from ksched.cluster.load import BASE, BURST_TO
from ksched.loop.client import ApiUnavailableError, Response
from ksched.objects import Obj

T0 = 1_800_000_000.0


def _bound(pod: Obj, at: float | None, node: str = "n1") -> Obj:
    if at is not None:
        pod["spec"]["nodeName"] = node
        stamp = datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        pod["status"] = {
            "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": stamp}]
        }
    return pod


def _pods() -> list[Obj]:
    # synchronized-bursts: half the workloads burst, so the steady usage is not the burst's.
    pods = scenario("synchronized-bursts", 12, "ns", "oracle-measured", seed=4, rate=10).pods
    assert all(EXPECTED_CPU not in p["metadata"]["annotations"] for p in pods), "placed blind"
    return pods


def test_a_pod_is_told_its_steady_usage_a_scrape_after_its_bind_and_not_before() -> None:
    pods = _pods()
    _bound(pods[0], T0)
    _bound(pods[1], T0 + 10)
    _bound(pods[2], None)  # pending
    told = due(pods, set(), 15.0, T0 + 20)
    assert [name for name, _ in told] == [pods[0]["metadata"]["name"]]
    annotations = pods[0]["metadata"]["annotations"]
    assert told[0][1] == f"{round(float(annotations[BASE]) * 0.5 * 1000)}m", "500m at its steady multiple"
    assert due(pods, {pods[0]["metadata"]["name"]}, 15.0, T0 + 20) == [], "once"


def test_a_bursting_pod_is_told_its_steady_usage_not_its_burst() -> None:
    pods = _pods()
    bursting = next(p for p in pods if float(p["metadata"]["annotations"].get(BURST_TO, "0")) > 0)
    [(_, cpu)] = due([_bound(bursting, T0)], set(), 15.0, T0 + 15)
    assert cpu == f"{round(float(bursting['metadata']['annotations'][BASE]) * 500)}m"


@dataclass
class FakeKube:
    pods: list[Obj]
    refuse: set[str] = field(default_factory=set)
    patches: list[tuple[str, Any]] = field(default_factory=list)
    down: bool = False

    def request(self, method: str, path: str, **kw: Any) -> Response:
        if self.down:
            raise ApiUnavailableError(f"{method} {path}: connection refused")
        if method == "GET":
            assert path == "/api/v1/namespaces/ns/pods" and kw["query"] == {"resourceVersion": "0"}
            return Response(200, orjson.dumps({"items": self.pods}))
        assert method == "PATCH" and kw["content_type"] == "application/merge-patch+json"
        name = path.rsplit("/", 1)[-1]
        if name in self.refuse:
            return Response(409, b"{}")
        self.patches.append((name, kw["body"]))
        return Response(200, b"{}")


def test_the_teller_patches_each_due_pod_once_and_counts_what_it_could_not_tell() -> None:
    pods = [_bound(p, T0) for p in _pods()[:3]]
    names = [p["metadata"]["name"] for p in pods]
    kube = FakeKube(pods, refuse={names[2]})
    teller = Teller(kube, "ns", 15.0)  # type: ignore[arg-type]
    teller.tick(now=T0 + 15 - EARLY_S - 1)
    assert kube.patches == [], "not before a scrape could have seen them"
    teller.tick(now=T0 + 15 - EARLY_S)
    teller.tick(now=T0 + 16)
    assert [name for name, _ in kube.patches] == names[:2]
    assert all(EXPECTED_CPU in body["metadata"]["annotations"] for _, body in kube.patches)
    assert teller.failed == 2, "the refused pod, on each tick"
    assert teller.told == set(names[:2])


def test_the_teller_counts_an_api_server_that_does_not_answer_and_looks_again() -> None:
    pods = [_bound(p, T0) for p in _pods()[:1]]
    kube = FakeKube(pods, down=True)
    teller = Teller(kube, "ns", 15.0)  # type: ignore[arg-type]
    teller.tick(now=T0 + 20)
    assert (teller.failed, kube.patches) == (1, []), "counted, not raised: the thread lives on"
    kube.down = False
    teller.tick(now=T0 + 25)
    assert [name for name, _ in kube.patches] == [pods[0]["metadata"]["name"]]


def test_oracle_measured_runs_on_pools_with_the_example_configuration() -> None:
    assert ORACLE_MEASURED in POOLED_SETUPS
    assert _config_of(QualityOptions(), ORACLE_MEASURED) == EXAMPLE_CONFIG
