"""The benchmarks run wherever ksched is installed, not only from a checkout.

The quality bench's default configurations come from the installed package (a wheel
carries ``ksched/examples/``), and a bench that draws a chart, run without matplotlib
(the ``bench`` extra), says so at its start and still writes its table and JSON instead
of failing at the end.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import NoReturn

import pytest

import ksched
from ksched.bench import charts
from ksched.bench.quality import run as quality
from ksched.bench.quality.figures import QualityFigures, QualityResults
from ksched.bench.quality.observe import ksched_config
from ksched.bench.quality.report import write
from ksched.bench.sidebyside import run as sidebyside
from ksched.config import load_config
from ksched.config.examples import example_path

PACKAGE = Path(ksched.__file__).resolve().parent
PNG = b"\x89PNG\r\n\x1a\n"


class StoppedError(Exception):
    """Raised where a bench would start its control plane: the test has seen what it needs."""


def _stop(*_args: object, **_kwargs: object) -> NoReturn:
    raise StoppedError


@pytest.mark.parametrize(
    ("label", "name"),
    [
        (quality.KSCHED, "load-aware.yaml"),
        (quality.KSCHED_REBALANCE, "rebalance.yaml"),
    ],
)
def test_the_quality_bench_default_configs_come_from_the_installed_package(label: str, name: str) -> None:
    path = quality._config_of(quality.QualityOptions(), label)
    assert path == example_path(name), f"want {example_path(name)}, got {path}"
    assert path.is_relative_to(PACKAGE), f"{path} is not inside the package at {PACKAGE}"
    assert path.is_file(), path
    config = load_config(path)
    assert config.profiles, f"{path} loads as a configuration with a profile"
    # What the bench writes for ksched run: the file read, pointed at the run's Prometheus.
    assert ksched_config(path, "http://prometheus:9090")["prometheus"]["url"] == "http://prometheus:9090"


def test_the_checkout_examples_folder_is_the_package_one() -> None:
    checkout = Path(__file__).resolve().parents[2] / "examples"
    assert checkout.resolve() == example_path("load-aware.yaml").parent.resolve()


def _results() -> QualityResults:
    figures = QualityFigures("ksched", "burst", 6, bands=[(0.0, 0.2, 0.5, 0.7), (15.0, 0.3, 0.6, 0.9)])
    return QualityResults({"threshold": "0.8"}, [figures])


def test_without_matplotlib_pyplot_says_so_and_draws_nothing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    assert charts.pyplot() is None
    assert capsys.readouterr().err == charts.MISSING + "\n"


@pytest.mark.parametrize(("name", "with_matplotlib"), [("installed", True), ("missing", False)])
def test_the_quality_report_writes_its_table_and_json_and_a_chart_only_with_matplotlib(
    name: str, with_matplotlib: bool, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    if not with_matplotlib:
        monkeypatch.setitem(sys.modules, "matplotlib", None)
    write(_results(), tmp_path, charts.pyplot())
    assert json.loads((tmp_path / "results.json").read_text())["runs"][0]["scenario"] == "burst", name
    assert "burst" in (tmp_path / "table.md").read_text(), name
    chart = tmp_path / "utilisation.png"
    got = chart.read_bytes()[:8] == PNG if chart.exists() else False
    assert got == with_matplotlib, f"{name}: want a chart {with_matplotlib}, got {got}"


def test_the_quality_bench_says_matplotlib_is_missing_before_its_cluster_starts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setattr(quality.local, "up", _stop)
    with pytest.raises(StoppedError):
        quality.run_quality(quality.QualityOptions(out=tmp_path), log=lambda _line: None)
    assert capsys.readouterr().err == charts.MISSING + "\n"


def test_the_cluster_bench_runs_without_matplotlib_and_says_so_first(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setattr(sidebyside, "ensure_built", _stop)
    with pytest.raises(StoppedError):
        sidebyside.main(
            nodes=10,
            pods=10,
            workloads=["bare"],
            schedulers=["ksched"],
            extra=[],
            rate=10.0,
            steady_pods=0,
            out=str(tmp_path),
            stall_s=30.0,
            as_json=False,
        )
    assert capsys.readouterr().err == charts.MISSING + "\n"


def test_the_rebalance_example_places_with_the_load_aware_examples_metric_and_estimate() -> None:
    """``rebalance.yaml`` says it is ``load-aware.yaml`` with the rebalancer on: a bench that
    compares them measures the rebalancer, not a second estimate (it once lacked ``learn``)."""
    placing = load_config(example_path("load-aware.yaml")).metrics
    moving = load_config(example_path("rebalance.yaml")).metrics
    assert moving == placing
