"""Every recipe of docs/metric-recipes.md is a configuration `ksched simulate --metrics`
accepts, and its metric steers the placements it says it does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from ksched.commands.cli import main
from ksched.config import load_config

ROOT = Path(__file__).resolve().parents[2]
RECIPES = sorted((ROOT / "examples" / "recipes").glob("*.yaml"))
CLUSTER = ROOT / "examples" / "cluster.yaml"
NODES = ("cheap-a", "pricey-b", "gpu-c", "cordoned-d")


def test_the_page_shows_every_recipe() -> None:
    page = (ROOT / "docs" / "metric-recipes.md").read_text()
    assert RECIPES, "examples/recipes holds the recipes"
    for recipe in RECIPES:
        assert f"examples/recipes/{recipe.name}" in page, recipe.name


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.stem)
def test_recipe_steers_placements(recipe: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = load_config(recipe)
    profile = config.profile("ksched")
    assert profile is not None
    metric = config.metrics[0]
    runs = profile.metrics is None or metric.name in profile.metrics
    # cheap-a is the worst node by the metric (over its threshold where it has one), the
    # others are alike: where the ksched profile runs the metric, no pod goes to cheap-a.
    worst, fine = (0.0, 0.5) if metric.prefer == "higher" else ((metric.above or 10.0) + 0.05, 0.1)
    values = {node: {metric.name: worst if node == "cheap-a" else fine} for node in NODES}
    metrics_file = tmp_path / "metrics.yaml"
    metrics_file.write_text(yaml.safe_dump(values))
    code = main(
        ["simulate", str(CLUSTER), "--config", str(recipe), "--metrics", str(metrics_file), "-o", "json"]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 1, "too-big fits nowhere, whatever the metric"
    placed = {p["pod"]: p.get("node") for p in out["placements"]}
    assert placed.get("default/web-0"), "an ordinary pod is placed"
    if runs:
        assert "cheap-a" not in placed.values(), f"{metric.name} keeps pods off its worst node"
