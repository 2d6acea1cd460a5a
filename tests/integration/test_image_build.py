"""The image built from this checkout by ``ksched image build`` starts, runs as its user on a
read-only root filesystem, and lacks nothing ksched imports (the Dockerfile prunes packages from its virtual environment).

The image is the session's (conftest's ``image``: the engine's wheel built here, packed by the
Dockerfile). On a fresh machine the Debian bases take 2-3 minutes; compiling the engine in the
builder stage instead, as a plain ``ksched image build`` does, 12.5 minutes on two busy cores.
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest

from ksched.cluster.image import build, tools

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).parents[2]
TAG = "ksched:test"
# Imported only by `ksched bench --cluster`, an extra the image does not install.
EXTRAS = {"matplotlib"}

# Run by the image's python3: import every module given on stdin's JSON list and
# every module of the ksched package; print the ones that fail, with why.
IMPORT_EVERYTHING = """
import importlib, json, pkgutil, sys, ksched
names = json.loads(sys.argv[1])
names += [m.name for m in pkgutil.walk_packages(ksched.__path__, "ksched.")]
failed = {}
for name in names:
    try:
        importlib.import_module(name)
    except Exception as err:
        failed[name] = f"{type(err).__name__}: {err}"
print(json.dumps(failed))
"""


def third_party_imports() -> list[str]:
    """Every module outside the standard library that ksched's source imports, anywhere."""
    names: set[str] = set()
    for path in (ROOT / "python" / "ksched").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module)
    return sorted(
        name for name in names if name.split(".")[0] not in sys.stdlib_module_names | {"ksched"} | EXTRAS
    )


@pytest.fixture(scope="module")
def built(image: tuple[build.BuildResult, float]) -> build.BuildResult:
    return image[0]


def test_the_image_starts_as_its_non_root_user_on_a_read_only_root(built: build.BuildResult) -> None:
    from ksched import __version__

    assert built.version == f"ksched {__version__}"
    assert build.run_in_image(built.builder, TAG, ["id", "-u"]).strip() == "10001"
    with pytest.raises(tools.ImageError, match="Read-only file system"):
        build.run_in_image(built.builder, TAG, ["touch", "/probe"])


def test_the_pruned_image_imports_everything_ksched_names(built: build.BuildResult) -> None:
    named = third_party_imports()
    assert "kubernetes.leaderelection" in named and "prometheus_api_client" in named
    failed = json.loads(
        build.run_in_image(built.builder, TAG, ["python3", "-c", IMPORT_EVERYTHING, json.dumps(named)])
    )
    assert {name: why for name, why in failed.items() if not any(e in why for e in EXTRAS)} == {}


def test_the_report_names_the_layers_and_packages_that_dominate(built: build.BuildResult) -> None:
    report = built.report
    assert report.size > 0
    assert any("/opt/ksched" in layer.created_by for layer in report.layers)
    names = [name for name, _ in report.packages]
    assert "kubernetes" in names[:5] and "numpy" in names[:5]
    assert not {"pip", "setuptools", "aiohttp"} & set(names), "pruned packages are back"
