"""An image's layers and which of them dominate its size.

Owns reading the layers from what the builder stores: buildah's ``inspect``
(the image's manifest, whose layer sizes are the uncompressed tarballs in its
storage, and its config, whose history says which step made each layer) and
Docker's ``history``; and the report ``ksched image build`` prints: the total,
the largest layers until they cover :data:`DOMINANT_SHARE` of it, and the
largest packages of the image's virtual environment (read inside the image by
:data:`PACKAGE_SIZES_SCRIPT`). Parsing is pure; build.py runs the commands.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

# Layers are listed, largest first, until they cover this share of the image;
# the rest are summed in one line.
DOMINANT_SHARE = 0.95
PACKAGES_SHOWN = 8
MB = 1_000_000

# Run by the image's own python3: the size of each top-level entry of the virtual
# environment's site-packages, its .dist-info folders counted with their package.
PACKAGE_SIZES_SCRIPT = """
import json, os, sys, sysconfig
root = sysconfig.get_paths()["purelib"]
sizes = {}
for name in os.listdir(root):
    path = os.path.join(root, name)
    total = os.path.getsize(path) if os.path.isfile(path) else sum(
        os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs
        if not os.path.islink(os.path.join(d, f)))
    key = name.split("-")[0].lower().replace("_", "-") if name.endswith(".dist-info") else name
    sizes[key] = sizes.get(key, 0) + total
json.dump(sizes, sys.stdout)
"""


@dataclass(frozen=True)
class Layer:
    size: int
    created_by: str


@dataclass(frozen=True)
class ImageReport:
    image: str
    layers: tuple[Layer, ...]
    packages: tuple[tuple[str, int], ...] = ()

    @property
    def size(self) -> int:
        return sum(layer.size for layer in self.layers)


def _step(created_by: str) -> str:
    """A history line as the Dockerfile wrote it, without the shell prefix builders add."""
    step = " ".join(created_by.split())
    for prefix in ("/bin/sh -c #(nop) ", "|0 /bin/sh -c ", "/bin/sh -c "):
        if step.startswith(prefix):
            return step.removeprefix(prefix)
    if step.startswith("|"):
        # buildah's RUN with build arguments: "|2 NAME=value NAME=value /bin/sh -c ..."
        return step.partition("/bin/sh -c ")[2] or step
    return step


def from_buildah_inspect(inspect: dict[str, Any]) -> tuple[Layer, ...]:
    """The layers of ``buildah inspect --type image`` output, oldest first.

    The manifest lists the layers; the config's history lists every step, those that
    made no layer marked ``empty_layer``, in the same order."""
    manifest = json.loads(inspect["Manifest"])
    config = json.loads(inspect["Config"])
    steps = [h.get("created_by", "") for h in config.get("history", []) if not h.get("empty_layer")]
    sizes = [int(layer["size"]) for layer in manifest["layers"]]
    if len(steps) != len(sizes):
        steps = [""] * len(sizes)
    return tuple(Layer(size, _step(step)) for size, step in zip(sizes, steps, strict=True))


def from_docker_history(lines: str) -> tuple[Layer, ...]:
    """The layers of ``docker history --human=false --no-trunc --format '{{json .}}'``
    output (newest first, one JSON object a line), oldest first; steps that made no
    layer (size 0) are left out."""
    layers = []
    for line in lines.splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        size = int(row.get("Size") or 0)
        if size:
            layers.append(Layer(size, _step(row.get("CreatedBy", ""))))
    return tuple(reversed(layers))


def parse_package_sizes(output: str) -> tuple[tuple[str, int], ...]:
    sizes: dict[str, int] = json.loads(output)
    return tuple(sorted(sizes.items(), key=lambda item: (-item[1], item[0])))


def _mb(size: int) -> str:
    return f"{size / MB:7.1f} MB"


def format_report(report: ImageReport, step_chars: int = 90) -> str:
    total = report.size
    lines = [f"image {report.image}: {total / MB:.1f} MB in {len(report.layers)} layers"]
    covered = 0
    ranked = sorted(report.layers, key=lambda layer: -layer.size)
    for shown, layer in enumerate(ranked):
        if total and covered >= DOMINANT_SHARE * total:
            rest = ranked[shown:]
            smaller = f"{len(rest)} smaller layer{'s' if len(rest) > 1 else ''}"
            lines.append(f"  {_mb(sum(r.size for r in rest))}        {smaller}")
            break
        covered += layer.size
        share = 100 * layer.size / total if total else 0.0
        step = layer.created_by or "(no history)"
        if len(step) > step_chars:
            step = step[: step_chars - 3] + "..."
        lines.append(f"  {_mb(layer.size)} {share:4.0f}%  {step}")
    if report.packages:
        lines.append("largest packages in /opt/ksched:")
        for name, size in report.packages[:PACKAGES_SHOWN]:
            lines.append(f"  {_mb(size)}  {name}")
    return "\n".join(lines)
