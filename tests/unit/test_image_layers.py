"""The image's layer report: buildah's manifest and history, Docker's history, the dominant layers."""

from __future__ import annotations

import json

import pytest

from ksched.cluster.image import layers

MB = 1_000_000


def _buildah_inspect(sizes: list[int], history: list[dict[str, object]]) -> dict[str, str]:
    manifest = {"layers": [{"digest": f"sha256:{i}", "size": size} for i, size in enumerate(sizes)]}
    return {"Manifest": json.dumps(manifest), "Config": json.dumps({"history": history})}


def test_buildah_layers_take_their_step_from_the_history_entries_that_made_a_layer() -> None:
    inspect = _buildah_inspect(
        [129 * MB, 160 * MB, 4096],
        [
            {"created_by": "mmdebstrap bookworm minbase + python3"},
            {"created_by": '/bin/sh -c #(nop) ENV PYTHONDONTWRITEBYTECODE="1"', "empty_layer": True},
            {"created_by": "/bin/sh -c #(nop) COPY dir:abc in /opt/ksched "},
            {"created_by": "|2 BUILDER_IMAGE=b RUNTIME_IMAGE=r /bin/sh -c useradd --uid 10001 ksched"},
            {"created_by": "/bin/sh -c #(nop) USER 10001:10001", "empty_layer": True},
        ],
    )
    got = layers.from_buildah_inspect(inspect)
    assert got == (
        layers.Layer(129 * MB, "mmdebstrap bookworm minbase + python3"),
        layers.Layer(160 * MB, "COPY dir:abc in /opt/ksched"),
        layers.Layer(4096, "useradd --uid 10001 ksched"),
    )


def test_buildah_layers_without_a_matching_history_keep_their_sizes() -> None:
    inspect = _buildah_inspect([10 * MB, 20 * MB], [{"created_by": "one step for two layers"}])
    assert [layer.size for layer in layers.from_buildah_inspect(inspect)] == [10 * MB, 20 * MB]
    assert {layer.created_by for layer in layers.from_buildah_inspect(inspect)} == {""}


def test_docker_history_is_read_oldest_first_without_its_empty_steps() -> None:
    rows = [
        {"CreatedBy": '/bin/sh -c #(nop)  ENTRYPOINT ["ksched" "run"]', "Size": "0"},
        {"CreatedBy": "RUN |0 /bin/sh -c useradd --uid 10001 ksched", "Size": "3500"},
        {"CreatedBy": "COPY /opt/ksched /opt/ksched # buildkit", "Size": "165000000"},
        {"CreatedBy": "/bin/sh -c #(nop) ADD file:1234 in / ", "Size": "74800000"},
    ]
    got = layers.from_docker_history("\n".join(json.dumps(row) for row in rows) + "\n")
    assert got == (
        layers.Layer(74_800_000, "ADD file:1234 in /"),
        layers.Layer(165_000_000, "COPY /opt/ksched /opt/ksched # buildkit"),
        layers.Layer(3500, "RUN |0 /bin/sh -c useradd --uid 10001 ksched"),
    )


def test_package_sizes_are_ranked_largest_first() -> None:
    got = layers.parse_package_sizes(json.dumps({"numpy": 45 * MB, "kubernetes": 58 * MB, "yaml": MB}))
    assert got == (("kubernetes", 58 * MB), ("numpy", 45 * MB), ("yaml", MB))


@pytest.mark.parametrize(
    ("sizes", "listed", "summed"),
    [
        pytest.param(
            [60 * MB, 100 * MB, MB, MB], ["step 1", "step 0"], "2 smaller layers", id="two-dominate"
        ),
        pytest.param([50 * MB, 50 * MB], ["step 0", "step 1"], None, id="all-needed"),
        pytest.param([2 * MB, 96 * MB, 2 * MB], ["step 1"], "2 smaller layers", id="one-dominates"),
    ],
)
def test_report_lists_the_largest_layers_until_they_cover_the_dominant_share(
    sizes: list[int], listed: list[str], summed: str | None
) -> None:
    report = layers.ImageReport(
        "ksched:test", tuple(layers.Layer(size, f"step {i}") for i, size in enumerate(sizes))
    )
    lines = layers.format_report(report).splitlines()
    assert lines[0] == f"image ksched:test: {sum(sizes) / MB:.1f} MB in {len(sizes)} layers"
    assert [line.split("%  ")[1] for line in lines[1 : 1 + len(listed)]] == listed
    assert lines[1 + len(listed) :] == ([] if summed is None else [lines[-1]])
    if summed is not None:
        assert lines[-1].endswith(summed)


def test_report_names_the_largest_packages() -> None:
    report = layers.ImageReport("ksched:test", (layers.Layer(MB, "base"),), (("kubernetes", 58 * MB),))
    text = layers.format_report(report)
    assert "largest packages in /opt/ksched:" in text
    assert "58.0 MB  kubernetes" in text
