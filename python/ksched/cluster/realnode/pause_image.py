"""The pause image every real node's sandboxes run (:data:`PAUSE_IMAGE`): a static binary
built with ``go build`` from ``ksched/cluster/pause/`` (:func:`ensure_pause`, cached by the
digest of its source) and packed alone into an OCI image layout (:func:`pause_archive`) that
each containerd imports. Needs no registry and pulls nothing.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile
from pathlib import Path
from typing import Any

from ksched.cluster import build

PAUSE_IMAGE = "localhost/ksched-pause:1"
# The Go source, in the cluster package beside this one (a folder of data, not a module).
PAUSE_SOURCE = Path(__file__).parent.parent / "pause"


def pause_binary() -> Path:
    digest = hashlib.sha256()
    for name in ("go.mod", "main.go"):
        digest.update((PAUSE_SOURCE / name).read_bytes())
    return build.bin_dir() / f"pause-{digest.hexdigest()[:12]}"


def ensure_pause() -> Path:
    binary = pause_binary()
    if binary.is_file():
        return binary
    work = build.bin_dir().parent / "src" / "pause"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(PAUSE_SOURCE, work)
    build.run_command(
        ["go", "build", "-trimpath", "-ldflags", "-s -w", "-o", str(binary), "."], work, "building pause"
    )
    return binary


def _blob(layout: tarfile.TarFile, data: bytes) -> dict[str, Any]:
    digest = hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo(f"blobs/sha256/{digest}")
    info.size = len(data)
    layout.addfile(info, io.BytesIO(data))
    return {"digest": f"sha256:{digest}", "size": len(data)}


def pause_archive(binary: Path, into: Path) -> Path:
    """An OCI image layout (a tar that ``ctr images import`` reads) holding ``/pause`` alone."""
    layer_bytes = io.BytesIO()
    with tarfile.open(fileobj=layer_bytes, mode="w") as layer:
        info = layer.gettarinfo(str(binary), arcname="pause")
        info.mode, info.uid, info.gid, info.uname, info.gname, info.mtime = 0o755, 0, 0, "", "", 0
        with binary.open("rb") as f:
            layer.addfile(info, f)
    layer_data = layer_bytes.getvalue()
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine)
    out = into / "pause-image.tar"
    with tarfile.open(out, "w") as layout:
        layer_desc = _blob(layout, layer_data)
        config = {
            "architecture": arch,
            "os": "linux",
            "config": {"Entrypoint": ["/pause"], "User": "65535:65535"},
            "rootfs": {"type": "layers", "diff_ids": [layer_desc["digest"]]},
        }
        config_desc = _blob(layout, json.dumps(config).encode())
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **config_desc},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", **layer_desc}],
        }
        manifest_desc = _blob(layout, json.dumps(manifest).encode())
        index = {
            "schemaVersion": 2,
            "manifests": [
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    **manifest_desc,
                    "annotations": {
                        "io.containerd.image.name": PAUSE_IMAGE,
                        "org.opencontainers.image.ref.name": PAUSE_IMAGE.rsplit(":", 1)[1],
                    },
                }
            ],
        }
        for name, data in (
            ("oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode()),
            ("index.json", json.dumps(index).encode()),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            layout.addfile(info, io.BytesIO(data))
    return out
