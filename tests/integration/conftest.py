"""Session-scoped local real control plane (etcd, kube-apiserver, KWOK, kube-scheduler, Prometheus)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ksched.cluster import local
from ksched.cluster.build import BuildError, missing_binaries
from ksched.cluster.image import build, tools
from ksched.loop.client import Kube, load_configuration
from tests.integration.helpers import Namespaces, create, delete_pods, unavailable

CLUSTER_NODES = 20
REPO = Path(__file__).resolve().parents[2]
IMAGE_TAG = "ksched:test"


@pytest.fixture(scope="module")
def kube(cluster: local.ClusterState) -> Kube:
    """Raw JSON access to the local API server as its admin."""
    return Kube(load_configuration(cluster.kubeconfig, 32))


@pytest.fixture
def namespace(kube: Kube) -> Iterator[Namespaces]:
    """Namespaces for one test (see :class:`Namespaces`); their pods are deleted afterwards."""
    made: list[str] = []

    def make(name: str, labels: dict[str, str] | None = None) -> str:
        metadata: dict[str, object] = {"name": name}
        if labels:
            metadata["labels"] = labels
        create(kube, [{"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}])
        made.append(name)
        return name

    yield make
    for name in made:
        delete_pods(kube, name)


@pytest.fixture(scope="session")
def exporter() -> Iterator[str]:
    from tests.integration.exporter import serve

    with serve() as address:
        yield address


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory, exporter: str) -> Iterator[local.ClusterState]:
    os.environ.setdefault("KSCHED_CLUSTER_DIR", str(tmp_path_factory.mktemp("cluster")))
    if shutil.which("go") is None and missing_binaries(with_helm=False):
        unavailable("Go is not installed and no cached binaries exist")
    try:
        state = local.up(
            nodes=CLUSTER_NODES,
            zones=3,
            with_scheduler=True,
            with_controllers=True,
            prometheus_targets=exporter,
        )
    except (BuildError, local.ClusterError) as err:
        unavailable(str(err))
        raise
    yield state
    local.down()


@pytest.fixture(scope="session")
def image(tmp_path_factory: pytest.TempPathFactory) -> tuple[build.BuildResult, float]:
    """ksched's image, built once per run from this checkout (``ksched image build --wheels``):
    the engine's wheel is built here by maturin, incrementally on the checkout's target/,
    and the Dockerfile packs it (compiling it again in the builder stage would cost a fresh
    machine 5-10 minutes). Returns the build result and the seconds the build took."""
    wheels = tmp_path_factory.mktemp("wheels")
    started = time.monotonic()
    made = subprocess.run(
        [sys.executable, "-m", "maturin", "build", "--release", "--out", str(wheels), "-q"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    if made.returncode != 0:
        pytest.fail(f"maturin build failed:\n{(made.stdout + made.stderr)[-3000:]}")
    try:
        result = build.build_image(IMAGE_TAG, REPO, wheels=wheels)
    except tools.ImageError as err:
        unavailable(f"the image could not be built: {err}")
        raise
    return result, time.monotonic() - started
