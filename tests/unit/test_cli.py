"""`ksched simulate` / `explain` from the command line: outputs, exit codes, bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from ksched.commands.cli import main
from tests.conftest import node, pod

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def write(tmp_path: Path, objs: list[Any]) -> str:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": objs}))
    return str(path)


def test_simulate_example_json(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        ["simulate", str(EXAMPLES / "cluster.yaml"), "--config", str(EXAMPLES / "price.yaml"), "-o", "json"]
    )
    out = json.loads(capsys.readouterr().out)
    by_pod = {p["pod"]: p for p in out["placements"]}
    assert code == 1, "one pod does not fit anywhere"
    assert by_pod["default/web-0"]["node"] == "cheap-a", "lowest price wins"
    assert by_pod["default/train-0"]["node"] == "gpu-c"
    assert by_pod["default/too-big"]["message"].startswith("0/4 nodes are available: ")
    assert "default/other" not in by_pod, "pods of other schedulers are ignored"


def test_explain_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", str(EXAMPLES / "cluster.yaml"), "default/web-0", "-o", "json"]) == 0
    [ex] = json.loads(capsys.readouterr().out)
    chosen = [n for n in ex["nodes"] if n["chosen"]]
    assert len(chosen) == 1 and chosen[0]["node"] == ex["node"]
    gpu = next(n for n in ex["nodes"] if n["node"] == "gpu-c")
    assert gpu["filter"] == {"plugin": "TaintToleration", "reasons": ["node(s) had untolerated taint(s)"]}


def test_pod_with_10000_labels_in_selector_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    huge = pod("huge", nodeSelector={f"k{i}": "v" for i in range(10_000)})
    code = main(["simulate", write(tmp_path, [node("a"), huge, pod("ok")]), "-o", "json"])
    placements = {p["pod"]: p for p in json.loads(capsys.readouterr().out)["placements"]}
    assert code == 1
    assert placements["default/ok"]["node"] == "a"
    assert "spec.nodeSelector" in placements["default/huge"]["message"]


def test_missing_fields_and_bad_yaml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bare = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "bare"},
        "spec": {"schedulerName": "ksched"},
    }
    assert main(["simulate", write(tmp_path, [node("a"), bare])]) == 0, (
        "a pod without containers requests nothing"
    )
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: [unclosed")
    assert main(["simulate", str(bad)]) == 2
    assert "not valid YAML" in capsys.readouterr().err


def test_bad_config_names_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "apiVersion: ksched.io/v1alpha1\nkind: KschedConfiguration\nmetrics:\n- name: x\n  source: carrier-pigeon\n"
    )
    assert main(["simulate", str(EXAMPLES / "cluster.yaml"), "--config", str(cfg)]) == 2
    assert (
        "metrics[0].source: 'carrier-pigeon' is not allowed (allowed: prometheus, annotation, metrics-server)"
        in capsys.readouterr().err
    )


def test_50mb_cluster_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nodes = [node(f"n{i}") for i in range(50)]
    filler = "x" * 1000
    pods = [pod(f"p{i}", cpu="10m", memory="1Mi") for i in range(200)]
    for p in pods:
        p["metadata"]["annotations"] = {f"note{j}": filler for j in range(250)}
    path = tmp_path / "big.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": nodes + pods}))
    assert path.stat().st_size > 50_000_000
    assert main(["simulate", str(path), "-o", "json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["placements"]) == 200


@pytest.mark.parametrize(
    "example", sorted(p.name for p in Path("examples").glob("*.yaml") if not p.name.startswith("cluster"))
)
def test_every_example_configuration_loads_and_simulates(
    example: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["simulate", "examples/cluster.yaml", "--config", f"examples/{example}", "-o", "json"])
    assert code in (0, 1), capsys.readouterr().err
    assert json.loads(capsys.readouterr().out)["placements"]


def test_annotate_rejects_what_is_not_a_number() -> None:
    from ksched.commands.annotate import parse_assignments
    from ksched.errors import KschedError

    assert parse_assignments(["n1=0.12", "n2-"]) == {"n1": "0.12", "n2": None}
    for bad in ["n1=cheap", "n1", "=3", "n1=nan"]:
        with pytest.raises(KschedError):
            parse_assignments([bad])


def test_bench_splits_its_time_into_rust_python_and_the_rest(capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        "bench",
        "--nodes",
        "40",
        "--pods",
        "120",
        "--existing",
        "20",
        "--batch-size",
        "32",
        "--no-reference",
    ]
    assert main([*args, "--json"]) == 0
    f = json.loads(capsys.readouterr().out)
    assert f["placed"] > 0
    assert f["rust_seconds"] > 0 and f["python_seconds"] > 0
    assert f["rust_seconds"] + f["python_seconds"] <= f["seconds"], "both are parts of the wall time"
    assert f["rust_share"] == pytest.approx(f["rust_seconds"] / f["seconds"])
    assert f["python_share"] == pytest.approx(f["python_seconds"] / f["seconds"])
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "Rust engine" in text and "inside ksched._core.schedule" in text
    assert "Python" in text and "parsing pods" in text


COMMANDS = [
    "run",
    "demo",
    "simulate",
    "explain",
    "status",
    "shadow",
    "shadow report",
    "rebalance",
    "bench",
    "annotate",
    "cluster",
    "cluster up",
    "cluster down",
    "cluster env",
    "image",
    "image build",
]


def cli_reference() -> str:
    """docs/cli.md: every command's --help as printed at 80 columns."""
    import contextlib
    import io

    from ksched.commands.cli import parser

    def helptext(args: list[str]) -> str:
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), contextlib.suppress(SystemExit):
            parser().parse_args(args)
        return buf.getvalue().rstrip()

    out = [
        "# Command line",
        "",
        "Every command's `--help`, as printed (kept in sync by `tests/unit/test_cli.py`).",
        "",
    ]
    out += ["## ksched", "", "```", helptext(["--help"]), "```", ""]
    for cmd in COMMANDS:
        out += [f"## ksched {cmd}", "", "```", helptext([*cmd.split(), "--help"]), "```", ""]
    return "\n".join(out)


def test_docs_list_every_command_help_and_each_has_an_example(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    reference = cli_reference()
    assert Path("docs/cli.md").read_text() == reference, "regenerate docs/cli.md from cli_reference()"
    for cmd in COMMANDS:
        if cmd != "cluster":
            section = reference.split(f"## ksched {cmd}\n", 1)[1].split("## ksched", 1)[0]
            assert "xample" in section or cmd.startswith("cluster "), f"ksched {cmd} --help has no example"


def test_explain_names_a_bound_pod_and_explains_it_without_itself(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # "a" has room for the 1-cpu pod only once: counted there, it would fit nowhere.
    objs = [node("a", cpu="1"), node("b", cpu="1", taints=[{"key": "k", "effect": "NoSchedule"}])]
    objs.append(pod("web", cpu="1", scheduler="default-scheduler", node_name="a"))
    assert main(["explain", write(tmp_path, objs), "default/web", "-o", "json"]) == 0
    captured = capsys.readouterr()
    [ex] = json.loads(captured.out)
    assert ex["node"] == "a"
    assert "default/web is bound to a: explained as if pending, without it (ksched)" in captured.err
    assert main(["explain", write(tmp_path, objs), "default/nope"]) == 2
    assert "default/nope: no such pod in " in capsys.readouterr().err


def test_bench_load_model_times_each_cycles_values_with_the_horizon_full(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``ksched bench --workload load-model``: the shipped estimate's values built a cycle over
    pods bound a few a cycle, timed once the recent pods fill its horizon."""
    args = ["bench", "--workload", "load-model", "--nodes", "20", "--batch-size", "2"]
    assert main([*args, "--json"]) == 0
    f = json.loads(capsys.readouterr().out)
    # window 90 s + maxAge 2m, or the warm-up if longer: as many half-second cycles of 2 binds.
    assert f["cycles"] >= 420 and f["recent_pods"] >= 2 * 420
    assert 0 < f["measured_pods"] < f["recent_pods"], "the last scrape's binds are not measured yet"
    assert f["workloads"] > f["recent_pods"] / 3
    assert 0 < f["ms_p50"] <= f["ms_p99"]
    assert main(args) == 0
    assert "values a cycle" in capsys.readouterr().out
    assert main([*args, "--quality"]) == 2
    assert "runs in-process" in capsys.readouterr().err


def test_bench_saturated_herd_places_each_replica_on_the_least_loaded_node_in_a_few_runs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``ksched bench --workload saturated-herd``: a herd's batch onto nodes all over the line
    goes, replica by replica, to a node within a hundredth of the one that reads least with it,
    in a few engine runs (one run a replica before the reruns were predicted)."""
    args = ["bench", "--workload", "saturated-herd", "--nodes", "40", "--pods", "120"]
    assert main([*args, "--json"]) == 0
    f = json.loads(capsys.readouterr().out)
    assert f["placed"] == f["saturated"] == f["least_loaded"] == 120 and f["runs"] <= 3
    assert main([*args, "--mixed-requests", "--json"]) == 0
    f = json.loads(capsys.readouterr().out)
    assert f["placed"] == 120 and 0 < f["saturated"] < 120
    assert main(args) == 0
    assert (
        "of them 120 on a node within a hundredth of the least loaded at their turn"
        in capsys.readouterr().out
    )
    assert main([*args, "--quality"]) == 2
    assert "runs in-process" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--ksched", "old"], "give LABEL=COMMAND"),
        (["--ksched", "kube-scheduler=/bin/true"], "the label 'kube-scheduler' is taken"),
        (["--workloads", "bare,gpu"], "unknown workload(s) gpu"),
        (["--schedulers", "volcano"], "unknown scheduler 'volcano'"),
        (["--rate", "0"], "--rate above 0"),
        (["--quality"], "--cluster and --quality are separate modes: give one"),
    ],
)
def test_bench_cluster_bad_options_are_clear_errors_before_any_cluster_starts(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["bench", "--cluster", "--out", str(tmp_path / "out"), *args]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_null_binder_uses_the_client_go_of_the_pinned_kubernetes() -> None:
    from ksched.cluster.build import KUBERNETES_VERSION, NULLBINDER_SOURCE

    gomod = (NULLBINDER_SOURCE / "go.mod").read_text()
    want = "v0." + KUBERNETES_VERSION.removeprefix("v1.")
    for module in ("k8s.io/client-go", "k8s.io/api", "k8s.io/apimachinery"):
        assert f"\t{module} {want}\n" in gomod, module


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--rate", "0"], "--minutes and --rate must be positive"),
        (["--minutes", "-1"], "--minutes and --rate must be positive"),
        (["--nodes", "5"], "--nodes: the soak needs at least 20 nodes"),
    ],
)
def test_bench_chaos_bad_options_are_clear_errors_before_any_cluster_starts(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "--chaos", *args]) == 2
    assert message in capsys.readouterr().err
