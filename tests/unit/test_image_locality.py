"""ImageLocality from the cluster's objects: image names as upstream
normalizes them, the node table's image states, and the scores `explain`
reports (upstream's formula, checked case by case in the engine crate)."""

from __future__ import annotations

from typing import Any

import pytest

from ksched.config import Config
from ksched.engine import Engine
from ksched.engine.pods import container_images, normalized_image_name
from ksched.engine.snapshot import build_snapshot
from ksched.loop.mirror.slim import slim_node, slim_pod
from tests.conftest import node, pod

MB = 1024 * 1024


def with_images(n: dict[str, Any], *images: tuple[list[str], int]) -> dict[str, Any]:
    n["status"]["images"] = [{"names": names, "sizeBytes": size_mb * MB} for names, size_mb in images]
    return n


@pytest.mark.parametrize(
    ("image", "want"),
    [
        ("nginx", "nginx:latest"),
        ("nginx:1.27", "nginx:1.27"),
        ("gcr.io/40", "gcr.io/40:latest"),
        ("registry:5000/app", "registry:5000/app:latest"),
        ("registry:5000/app:v2", "registry:5000/app:v2"),
    ],
)
def test_image_names_are_normalized_as_upstream(image: str, want: str) -> None:
    assert normalized_image_name(image) == want


def test_pod_images_count_init_containers_and_image_volumes() -> None:
    p = pod(
        "p",
        initContainers=[{"name": "init", "image": "gcr.io/300"}],
        volumes=[{"name": "v", "image": {"reference": "gcr.io/data:v1"}}, {"name": "e", "emptyDir": {}}],
    )
    images, containers = container_images(p)
    assert images == ("gcr.io/300:latest", "pause:latest", "gcr.io/data:v1")
    assert containers == 2
    assert container_images(slim_pod(p)) == (images, containers), (
        "the informer keeps what ImageLocality reads"
    )


def test_node_table_keeps_image_states() -> None:
    nodes = [
        with_images(node("a"), (["gcr.io/40:latest", "gcr.io/40:v1", "gcr.io/40:v1"], 40)),
        with_images(node("b"), (["gcr.io/40:latest"], 40), (["gcr.io/250:latest"], 250)),
        node("c"),
    ]
    snap = build_snapshot([slim_node(n) for n in nodes], [])
    a = snap.arrays
    got = {
        name: (int(a["image_sizes"][i]) // MB, int(a["image_node_counts"][i]))
        for name in ("gcr.io/40:latest", "gcr.io/40:v1", "gcr.io/250:latest")
        if (i := snap.images.get(name)) is not None
    }
    assert got == {"gcr.io/40:latest": (40, 2), "gcr.io/40:v1": (40, 1), "gcr.io/250:latest": (250, 1)}
    assert a["image_offsets"].tolist() == [0, 2, 4, 4]
    assert snap.image_ids(["gcr.io/250:latest", "nginx:latest"]) == [snap.images.get("gcr.io/250:latest")]


def test_explain_lists_image_locality_and_the_pod_goes_where_its_image_is() -> None:
    nodes = [
        node("a"),
        with_images(node("b"), (["registry.example/big:latest"], 2000)),
        node("c"),
    ]
    cases = [
        # 2000Mi x 1/3 nodes = 666Mi: 100 x (666 - 23) / (1000 - 23) = 65 on b, nothing elsewhere.
        ("image on one node", "registry.example/big", {"a": 0.0, "b": 65.0, "c": 0.0}, "b"),
        ("image no node has", "registry.example/small", {"a": 0.0, "b": 0.0, "c": 0.0}, None),
    ]
    for name, image, want, chosen in cases:
        p = pod("p")
        p["spec"]["containers"][0]["image"] = image
        result = Engine(Config()).schedule(build_snapshot(nodes, []), [p], explain="default/p")
        assert result.explanation is not None
        got = {n.node: n.scores["ImageLocality"]["normalized"] for n in result.explanation.nodes}
        assert got == want, name
        assert result.explanation.weights["ImageLocality"] == 1.0, name
        if chosen:
            assert result.placements[0].node == chosen, name
