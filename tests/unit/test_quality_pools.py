"""The quality harness's pools: disjoint, equal in size and in node shapes; a round stopped
while its pods arrive stops at once."""

from __future__ import annotations

import collections
import dataclasses
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson
import pytest

from ksched.bench.pods import parse_kscheds
from ksched.bench.quality import observe, run
from ksched.bench.quality.observe import StoppedError, VoidRoundError, create_scenario, settle
from ksched.bench.quality.pooled import Round, exited, log_beside, pools, scheduler_name
from ksched.bench.quality.run import EXAMPLE_CONFIG, SETUPS, QualityOptions, _config_of, run_quality
from ksched.bench.quality.scenarios import scenario
from ksched.cluster.kwok import fake_nodes
from ksched.commands.cli import main
from ksched.errors import KschedError
from ksched.loop.client import Response
from ksched.objects import Obj


def _shapes(names: list[str], by_name: dict[str, tuple[str, str]]) -> collections.Counter[tuple[str, str]]:
    return collections.Counter(by_name[n] for n in names)


@pytest.mark.parametrize(
    ("nodes", "count", "size"), [(1000, 4, 40), (1000, 4, 248), (100, 3, 32), (16, 4, 4)]
)
def test_pools_are_disjoint_and_alike(nodes: int, count: int, size: int) -> None:
    items = fake_nodes(nodes, 3)["items"]
    by_name = {
        n["metadata"]["name"]: (n["status"]["allocatable"]["cpu"], n["status"]["allocatable"]["memory"])
        for n in items
    }
    out = pools(items, count, size)
    assert [len(p) for p in out] == [size] * count
    assert len({n for p in out for n in p}) == count * size, "no node in two pools"
    assert all(_shapes(p, by_name) == _shapes(out[0], by_name) for p in out), "every pool has the same shapes"


def test_too_few_nodes_is_a_clear_error() -> None:
    with pytest.raises(KschedError, match="pools of at most 24 nodes"):
        pools(fake_nodes(100, 3)["items"], 4, 40)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--ksched", "ksched=/bin/true"], "the label 'ksched' is taken"),
        (["--ksched", "old=/bin/true", "--ksched", "old=/bin/false"], "the label 'old' is taken"),
        (["--quality-config", "cand=x.yaml", "--ksched", "cand=/bin/true"], "the label 'cand' is taken"),
        (["--ksched", "old"], "give LABEL=COMMAND"),
    ],
)
def test_other_builds_are_checked_before_any_cluster_starts(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["bench", "--quality", "--out", str(tmp_path / "out"), *args]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_another_build_runs_kscheds_configuration_with_its_own_command() -> None:
    """``--ksched before=COMMAND`` is a setup of its own, after the configurations, that runs
    the other build's ksched (a command split as a shell would) with ksched's configuration."""
    opts = QualityOptions(
        schedulers=("kube-scheduler", "ksched"),
        configs={"cand": Path("cand.yaml")},
        builds=parse_kscheds(["before=env PYTHONPATH=/old/python python3 -m ksched.commands.cli"], SETUPS),
    )
    assert opts.labels == ("kube-scheduler", "ksched", "cand", "before")
    assert opts.builds["before"] == ["env", "PYTHONPATH=/old/python", "python3", "-m", "ksched.commands.cli"]
    assert _config_of(opts, "before") == _config_of(opts, "ksched") == EXAMPLE_CONFIG
    assert _config_of(opts, "cand") == Path("cand.yaml")
    with pytest.raises(KschedError, match="unknown: ksched-rebalance"):
        run_quality(QualityOptions(builds={"ksched-rebalance": ["ksched"]}), log=print)


def test_a_label_kubernetes_cannot_name_a_namespace_after_stops_the_run_at_once() -> None:
    """A label names each scenario's namespace (``q-<scenario>-<label>``): an upper-case one,
    or one too long, is refused before any cluster starts, not when the API server refuses the
    namespace after minutes of start-up."""
    with pytest.raises(KschedError, match="the label 'headB' names the namespace 'q-herd-headB'"):
        run_quality(QualityOptions(scenarios=("herd",), builds={"headB": ["ksched"]}), log=print)
    with pytest.raises(KschedError, match=re.escape("the label 'c+' names the namespace 'q-herd-c-'")):
        run_quality(QualityOptions(scenarios=("herd",), configs={"c+": Path("c.yaml")}), log=print)
    long = "x" * 60
    with pytest.raises(KschedError, match=f"the label '{long}' names"):
        run_quality(QualityOptions(scenarios=("herd",), builds={long: ["ksched"]}), log=print)


def test_the_schedulers_logs_are_kept_under_out(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Each ksched's log and configuration go to ``--out``'s ``logs``, as the side by side's,
    where the operator finds them beside the table; without ``--out`` a run that ends well
    leaves no directory behind, and one that fails keeps it, with the logs that say why."""
    seen: list[Path] = []

    def scenarios(opts: QualityOptions, shapes: str, names: list[str], workdir: Path, *_: object) -> None:
        seen.append(workdir)
        (workdir / f"{names[0]}-ksched.log").write_text("placed\n")
        if opts.seed == 2:
            raise KschedError("the API server went away")

    monkeypatch.setattr(run, "_on_one_cluster", scenarios)
    monkeypatch.setattr(run, "pyplot", lambda: None)
    said: list[str] = []
    run_quality(QualityOptions(scenarios=("herd",), out=tmp_path / "out"), log=said.append)
    assert (tmp_path / "out" / "logs" / "herd-ksched.log").read_text() == "placed\n"
    assert (tmp_path / "out" / "results.json").exists()
    assert f"each scheduler's log and configuration: {tmp_path / 'out' / 'logs'}" in said
    run_quality(QualityOptions(scenarios=("herd",)), log=said.append)
    assert not seen[-1].exists(), "a run without --out that ended well leaves no directory behind"
    with pytest.raises(KschedError, match="went away"):
        run_quality(QualityOptions(scenarios=("herd",), seed=2), log=said.append)
    assert (seen[-1] / "herd-ksched.log").exists(), "a failed run keeps its logs"
    shutil.rmtree(seen[-1])


def test_shapes_put_every_scenario_on_the_nodes_named() -> None:
    """``--shapes mixed`` runs herd (on 4- and 8-core nodes by default) on nodes of 2-16 cores,
    where a herd's pods are a large share of a small node; an unknown name stops the run before
    any cluster starts."""
    assert QualityOptions().shapes_of("herd") == "standard"
    assert QualityOptions().shapes_of("diverse-deployments") == "mixed"
    assert QualityOptions(shapes="mixed").shapes_of("herd") == "mixed"
    assert QualityOptions(shapes="standard").shapes_of("diverse-deployments") == "standard"
    with pytest.raises(KschedError, match="unknown node shapes 'odd'"):
        run_quality(QualityOptions(shapes="odd"), log=print)


def test_a_label_on_two_pools_of_a_round_gets_a_scheduler_name_per_pool() -> None:
    """The demo runs ksched on two scenarios at once: two ksched processes with one name
    would both try to bind every pod of both pools."""

    def names(entries: tuple[tuple[str, str], ...]) -> list[str]:
        r = Round(entries=entries, pool_size=2, pods=4, seed=1, rate=1.0, observe_s=1.0,
                  scrape_interval_s=1.0, threshold=0.8, configs={})  # fmt: skip
        return [scheduler_name(r, i, label) for i, (_, label) in enumerate(entries)]

    assert names((("a", "kube-scheduler"), ("a", "ksched"), ("a", "oracle"))) == [
        "kube-scheduler",
        "ksched",
        "oracle",
    ]
    assert names((("a", "ksched"), ("b", "ksched"))) == ["ksched-0", "ksched-1"]


class _Pending:
    """A Kube whose namespace holds one pod nobody has placed (and nothing reported)."""

    def request(self, method: str, path: str, **_: object) -> object:
        class Answer:
            def json(self) -> dict[str, object]:
                return {"items": [{"metadata": {"name": "p"}, "spec": {}, "status": {}}]}

        return Answer()


def test_a_round_whose_ksched_died_stops_at_once_instead_of_waiting_out_its_pods(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A ksched that crashed (a segfault, here a process killed by a signal) leaves its pods
    pending; the round stops with why, and where its log is, rather than waiting them out and
    judging a void round. With no time left to wait, a settle that did not look would return
    the pending pod."""
    monkeypatch.setattr(observe, "SETTLE_TIMEOUT_S", 0.0)
    config = tmp_path / "herd-ksched.yaml"
    log_beside(config).write_text("Traceback (most recent call last):\n")
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    crash = "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"
    crashed = subprocess.Popen([sys.executable, "-c", crash, "--config", str(config)])
    try:
        crashed.wait(30)
        assert exited([alive]) is None
        why = exited([alive, crashed])
        assert why is not None and f"signal {int(signal.SIGSEGV)})" in why and "ended early" in why
        assert why.endswith(f"; its log: {tmp_path / 'herd-ksched.log'}"), why
        with pytest.raises(VoidRoundError, match=r"^waiting for the pods of q-ns: .* ended early \(signal"):
            settle(_Pending(), "q-ns", lambda: exited([alive, crashed]))  # type: ignore[arg-type]
        pods, _ = settle(_Pending(), "q-ns", lambda: exited([alive]))  # type: ignore[arg-type]
        assert len(pods) == 1, "all running: it waits as before (here, no time left)"
    finally:
        alive.kill()
        alive.wait()


class _Accepting:
    """A Kube that creates whatever is posted, and records what."""

    def __init__(self) -> None:
        self.posted: list[str] = []
        self.lock = threading.Lock()

    def request(self, method: str, path: str, body: Obj | None = None, **_: object) -> Response:
        with self.lock:
            self.posted.append(str((body or {}).get("metadata", {}).get("name")))
        return Response(
            201, orjson.dumps({**(body or {}), "metadata": {**(body or {})["metadata"], "uid": "u"}})
        )


@pytest.mark.parametrize("name", ["diverse-deployments", "slow-start", "herd"])
def test_a_stopped_round_stops_creating_its_pods_at_once_rather_than_waiting_out_the_arrivals(
    name: str,
) -> None:
    """Ctrl-C or SIGTERM stops the round in its main thread; each pool's creator runs in a
    thread of its own, creating pods over minutes, and the round cannot tear the cluster down
    before they end. Stopped, each ends at its next wait, having created no more."""
    kube = _Accepting()
    s = scenario(name, 600, "ns", "ksched", seed=1, rate=5)
    stop = threading.Event()
    failed: list[BaseException] = []

    def creating() -> None:
        try:
            create_scenario(kube, s, lag_s=60.0, stop=stop)  # type: ignore[arg-type]
        except BaseException as err:
            failed.append(err)

    worker = threading.Thread(target=creating)
    worker.start()
    deadline = time.monotonic() + 10
    while not kube.posted and time.monotonic() < deadline:
        time.sleep(0.01)
    assert kube.posted, "it began creating"
    stop.set()
    stopped_at = time.monotonic()
    worker.join(5)
    assert not worker.is_alive() and time.monotonic() - stopped_at < 2
    assert len(failed) == 1 and isinstance(failed[0], StoppedError)
    made = len(kube.posted)
    assert made < len(s.pods), "it stopped before the arrivals ended (minutes away)"
    time.sleep(0.2)
    assert len(kube.posted) == made, "and created nothing after"


class _Controller:
    """A Kube whose ReplicaSets make their pods from their templates, as
    kube-controller-manager does (a PATCH scales one), and that records every object posted,
    by kind, with the time it was."""

    def __init__(self) -> None:
        self.posted: list[tuple[str, Obj, float]] = []

    def request(self, method: str, path: str, body: Obj | None = None, **kw: object) -> Response:
        if method == "POST" and body is not None:
            self.posted.append((path.rsplit("/", 1)[1], body, time.monotonic()))
            return Response(201, orjson.dumps({**body, "metadata": {**body["metadata"], "uid": "u"}}))
        sets = {rs["metadata"]["name"]: rs for kind, rs, _ in self.posted if kind == "replicasets"}
        if method == "PATCH" and body is not None:
            sets[path.rsplit("/", 1)[1]]["spec"]["replicas"] = body["spec"]["replicas"]
            return Response(200, b"{}")
        selector = dict(kw.get("query") or {}).get("labelSelector")  # type: ignore[call-overload]
        made = [
            {"metadata": {"name": f"{app}-{i}x", "uid": f"{app}-{i}", **rs["spec"]["template"]["metadata"]}}
            for app, rs in sets.items()
            if selector in (None, f"app={app}")
            for i in range(rs["spec"]["replicas"])
        ]
        return Response(200, orjson.dumps({"items": made}))


@pytest.mark.parametrize(
    "name",
    [
        "diverse-deployments",
        "diverse-best-effort",
        "mixed-replicasets-diverse",
        "slow-start",
        "synchronized-bursts",
        "herd",
        "load-shift",
        "mixed-replicasets",
    ],
)
def test_a_controlled_scenario_s_pods_are_made_by_their_replicaset_as_a_deployment_s_are(
    name: str,
) -> None:
    """A Deployment's pods are owned from their creation, so a scheduler sees them as one
    workload when it places them (default topology spreading, ksched's per-workload
    estimate). The harness creates no bare pod for a scenario whose pods controllers own:
    each workload's ReplicaSet, created when the workload arrives (at its time, or at its
    first pod's turn at the rate), makes its pods, and its template is each of the
    scenario's pods of that workload but for the name."""
    s = scenario(name, 60, "ns", "ksched", seed=3, rate=100)
    assert s.controlled
    if s.arrivals is not None:
        s = dataclasses.replace(
            s, arrivals=tuple(dataclasses.replace(a, at_s=a.at_s / 1000) for a in s.arrivals)
        )
        firsts = [(a.first, a.count, a.at_s) for a in s.arrivals]
    else:
        apps = [p["metadata"]["labels"]["app"] for p in s.pods]
        starts = [i for i in range(len(apps)) if i == 0 or apps[i] != apps[i - 1]]
        firsts = [(i, end - i, i / 100) for i, end in zip(starts, [*starts[1:], len(apps)], strict=True)]
    kube = _Controller()
    began = time.monotonic()
    arrivals = create_scenario(kube, s, lag_s=0.0)  # type: ignore[arg-type]
    assert not [body for kind, body, _ in kube.posted if kind == "pods"], "no bare pod"
    sets = [(rs, at) for kind, rs, at in kube.posted if kind == "replicasets"]
    assert [rs["metadata"]["name"] for rs, _ in sets] == [
        s.pods[first]["metadata"]["labels"]["app"] for first, _, _ in firsts
    ], "one ReplicaSet per workload, in the order they arrive"
    for (first, count, at_s), (rs, at) in zip(firsts, sets, strict=True):
        assert at - began >= at_s, "not before its time"
        herd = s.scale_up is not None and rs["metadata"]["name"] == s.scale_up[0]
        assert rs["spec"]["replicas"] == (s.scale_up[1] if herd else count)  # type: ignore[index]
        template = rs["spec"]["template"]
        for pod in s.pods[first : first + count]:
            assert template["spec"] == pod["spec"]
            assert template["metadata"] == {
                k: v for k, v in pod["metadata"].items() if k not in ("name", "namespace")
            }
    herd = (
        s.scale_up[1] - sum(1 for p in s.pods if p["metadata"]["labels"]["app"] == s.scale_up[0])
        if s.scale_up
        else 0
    )
    assert len(arrivals.created) == len(s.pods) + herd
    parts = [len(names) for _, names in arrivals.starts]
    if s.arrivals is not None:
        assert sorted(parts) == sorted(a.count for a in s.arrivals), "a part per workload"
    else:
        assert parts == [len(s.pods)] + ([herd] if herd else []), "one part, and the herd's"


def test_a_run_that_stops_part_way_still_writes_what_it_judged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Scenarios of different node shapes run on control planes in turn; where a later one
    fails, the table and results.json keep the figures of those before it, and say why the
    run stopped."""
    from ksched.bench.quality import run
    from ksched.bench.quality.figures import QualityFigures

    def one_cluster(opts: QualityOptions, shapes: str, names: list[str], *rest: object) -> None:
        results = rest[1]
        if shapes == "mixed":
            raise KschedError("PATCH .../replicasets/herd: Connection aborted")
        results.figures.append(QualityFigures("ksched", names[0], 1))  # type: ignore[attr-defined]

    monkeypatch.setattr(run, "_on_one_cluster", one_cluster)
    opts = QualityOptions(scenarios=("requests-lie", "diverse-deployments"), out=tmp_path)
    with pytest.raises(KschedError, match="Connection aborted"):
        run_quality(opts, lambda _: None)
    document = orjson.loads((tmp_path / "results.json").read_bytes())
    assert [r["scenario"] for r in document["runs"]] == ["requests-lie"]
    assert document["violations"] == [
        "the run stopped early: KschedError: PATCH .../replicasets/herd: Connection aborted"
    ]
    assert "requests-lie" in (tmp_path / "table.md").read_text()
