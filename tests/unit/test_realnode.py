"""The real nodes' plan, pause image and state, and image names as containerd knows them
(the nodes themselves run in tests/integration/test_in_cluster.py and test_teardown.py)."""

from __future__ import annotations

import hashlib
import io
import ipaddress
import json
import tarfile
from pathlib import Path

import pytest

from ksched.cluster import realnode
from ksched.cluster.image.build import containerd_name, reference
from ksched.cluster.processes import ClusterError

KWOK_POD_NETWORK = ipaddress.IPv4Network("10.244.0.0/16")


def test_each_node_gets_its_own_bridge_subnet_folder_and_ports(tmp_path: Path) -> None:
    nodes = realnode.plan(3, tmp_path)
    assert [n.name for n in nodes] == ["real-node-0", "real-node-1", "real-node-2"]
    assert len({n.bridge for n in nodes}) == 3 and all(len(n.bridge) <= 15 for n in nodes)
    subnets = [ipaddress.IPv4Network(n.subnet) for n in nodes]
    assert all(s.subnet_of(realnode.POD_NETWORK) for s in subnets)
    assert not realnode.POD_NETWORK.overlaps(KWOK_POD_NETWORK), "real pods would share KWOK pods' addresses"
    assert all(not a.overlaps(b) for i, a in enumerate(subnets) for b in subnets[i + 1 :])
    assert all(ipaddress.ip_address(n.gateway) in s for n, s in zip(nodes, subnets, strict=True))
    assert len({n.kubelet_port for n in nodes} | {n.healthz_port for n in nodes}) == 6
    assert realnode.api_address(nodes) == nodes[0].gateway


def test_sockets_stay_short_however_deep_the_state_directory(tmp_path: Path) -> None:
    deep = tmp_path.joinpath(*["a-rather-long-folder-name"] * 8)
    (node,) = realnode.plan(1, deep)
    assert len(node.socket + ".ttrpc") < 104
    assert node.runtime_dir != realnode.plan(1, tmp_path)[0].runtime_dir


@pytest.mark.parametrize("count", [0, -1, realnode.MAX_REAL_NODES + 1])
def test_a_count_out_of_range_is_refused(tmp_path: Path, count: int) -> None:
    with pytest.raises(ClusterError, match="--real-nodes must be between 1 and"):
        realnode.plan(count, tmp_path)


def test_the_state_round_trips(tmp_path: Path) -> None:
    nodes = realnode.plan(2, tmp_path)
    changes = realnode.HostChanges(
        ip_forward="0", netns_before=("x",), kube_chains_before=("iptables/nat/KUBE-X",)
    )
    saved = json.loads(json.dumps(realnode.to_state(nodes, changes)))
    assert realnode.from_state(saved) == (nodes, changes)


def test_the_pause_image_is_an_oci_layout_holding_one_executable(tmp_path: Path) -> None:
    binary = tmp_path / "pause-bin"
    binary.write_bytes(b"\x7fELF not really")
    archive = realnode.pause_archive(binary, tmp_path)
    with tarfile.open(archive) as layout:

        def blob(descriptor: dict[str, str]) -> bytes:
            algorithm, digest = descriptor["digest"].split(":")
            data = layout.extractfile(f"blobs/{algorithm}/{digest}").read()  # type: ignore[union-attr]
            assert hashlib.sha256(data).hexdigest() == digest
            return data

        assert json.loads(layout.extractfile("oci-layout").read()) == {"imageLayoutVersion": "1.0.0"}  # type: ignore[union-attr]
        (entry,) = json.loads(layout.extractfile("index.json").read())["manifests"]  # type: ignore[union-attr]
        assert entry["annotations"]["io.containerd.image.name"] == realnode.PAUSE_IMAGE
        manifest = json.loads(blob(entry))
        config = json.loads(blob(manifest["config"]))
        (layer_descriptor,) = manifest["layers"]
        assert config["rootfs"]["diff_ids"] == [layer_descriptor["digest"]]
        assert config["config"]["Entrypoint"] == ["/pause"] and config["os"] == "linux"
        with tarfile.open(fileobj=io.BytesIO(blob(layer_descriptor))) as layer:
            (member,) = layer.getmembers()
            assert member.name == "pause" and member.mode == 0o755
            assert layer.extractfile(member).read() == binary.read_bytes()  # type: ignore[union-attr]


def test_the_pause_binary_is_named_after_its_go_source() -> None:
    source = Path(realnode.__file__).parent.parent / "pause"
    digest = hashlib.sha256((source / "go.mod").read_bytes() + (source / "main.go").read_bytes()).hexdigest()
    assert realnode.pause_binary().name == f"pause-{digest[:12]}"


def test_prometheus_scrapes_each_kubelet_labelled_with_its_node(tmp_path: Path) -> None:
    nodes = realnode.plan(2, tmp_path)
    (job,) = realnode.scrape_configs(nodes)
    assert job["job_name"] == realnode.KUBELET_JOB and job["metrics_path"] == "/metrics/resource"
    assert [(c["targets"], c["labels"]) for c in job["static_configs"]] == [
        ([f"{n.gateway}:{n.kubelet_port}"], {"node": n.name}) for n in nodes
    ]


@pytest.mark.parametrize(
    ("builder", "tag", "ref", "listed"),
    [
        ("buildah", "ksched:dev", "localhost/ksched:dev", "localhost/ksched:dev"),
        ("buildah", "registry.example:5000/team/ksched:1", "registry.example:5000/team/ksched:1", None),
        ("docker", "ksched:dev", "ksched:dev", "docker.io/library/ksched:dev"),
        ("docker", "team/ksched:dev", "team/ksched:dev", "docker.io/team/ksched:dev"),
    ],
)
def test_an_image_is_named_as_the_kubelet_asks_containerd_for_it(
    builder: str, tag: str, ref: str, listed: str | None
) -> None:
    assert reference(builder, tag) == ref  # type: ignore[arg-type]
    assert containerd_name(ref) == (listed or ref)
