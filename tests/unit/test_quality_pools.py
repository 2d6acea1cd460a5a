"""The quality harness's pools: disjoint, equal in size and in node shapes."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest

from ksched.bench.pods import parse_kscheds
from ksched.bench.quality.pooled import Round, pools, scheduler_name
from ksched.bench.quality.run import EXAMPLE_CONFIG, SETUPS, QualityOptions, _config_of, run_quality
from ksched.cluster.kwok import fake_nodes
from ksched.commands.cli import main
from ksched.errors import KschedError


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
