"""The Debian base images of the buildah path, made by mmdebstrap and cached.

Owns the two bases ``deploy/Dockerfile`` takes as build arguments when Docker's
official images cannot be pulled: the builder (rustc and cargo, python3 and its
venv module: Debian trixie, whose rustc is the first to meet the engine's
``rust-version``) and the runtime (python3 3.11 and its venv module: bookworm,
as the default ``python:3.11-slim-bookworm``). Each root filesystem is cached as
a tarball under ``~/.cache/ksched/images/`` and each image in buildah's storage,
both keyed by a digest of the suite, the package list and the options, so a
changed list makes a new base and an unchanged one is never made twice. Never:
names a mirror (mmdebstrap's default, the Debian archive, is used).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ksched.cluster.build import cache_root
from ksched.cluster.image.tools import run

# Files a container never reads (manual pages, documentation but for its
# copyright files, translations), left out as Docker's slim images leave them out.
DPKG_PATH_OPTIONS = (
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/locale/*",
    "path-exclude=/usr/share/info/*",
)
# mmdebstrap's own merged-/usr hook: without it, bookworm's merged /usr comes from the
# usrmerge package, which brings the whole of perl (50 MB) into the image.
MERGED_USR_HOOKS = "/usr/share/mmdebstrap/hooks/merged-usr"
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DIGEST_CHARS = 12


@dataclass(frozen=True)
class DebianBase:
    """A minbase root filesystem of ``suite`` with ``packages``, as a base image."""

    role: str
    suite: str
    packages: tuple[str, ...]

    @property
    def key(self) -> str:
        """The digest of everything that shapes the root filesystem."""
        shape = {
            "suite": self.suite,
            "variant": "minbase",
            "packages": sorted(self.packages),
            "dpkg": list(DPKG_PATH_OPTIONS),
            "hooks": MERGED_USR_HOOKS,
        }
        return hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest()[:DIGEST_CHARS]

    @property
    def tag(self) -> str:
        return f"localhost/ksched-base-{self.role}:{self.suite}-{self.key}"

    def tarball(self, cache: Path) -> Path:
        return cache / f"{self.role}-{self.suite}-{self.key}.tar"

    @property
    def description(self) -> str:
        return f"mmdebstrap {self.suite} minbase + {','.join(self.packages)}"


BUILDER_BASE = DebianBase(
    "builder", "trixie", ("rustc", "cargo", "python3", "python3-venv", "ca-certificates")
)
RUNTIME_BASE = DebianBase("runtime", "bookworm", ("python3", "python3-venv", "ca-certificates"))


def images_cache() -> Path:
    return cache_root() / "images"


def mmdebstrap_command(base: DebianBase, out: Path) -> list[str]:
    cmd = ["mmdebstrap", "--variant=minbase", f"--hook-dir={MERGED_USR_HOOKS}"]
    cmd.append(f"--include={','.join(base.packages)}")
    cmd += [f"--dpkgopt={option}" for option in DPKG_PATH_OPTIONS]
    return [*cmd, base.suite, str(out)]


def _has_image(tag: str) -> bool:
    proc = subprocess.run(["buildah", "inspect", "--type", "image", tag], capture_output=True, check=False)
    return proc.returncode == 0


def ensure_base(base: DebianBase, cache: Path) -> str:
    """The base's image tag in buildah's storage, made from the cached tarball, or from a
    new one that mmdebstrap writes, when buildah does not hold it yet."""
    if _has_image(base.tag):
        return base.tag
    tarball = base.tarball(cache)
    if not tarball.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        partial = tarball.with_suffix(".partial.tar")
        started = time.monotonic()
        run(["nice", "-n", "19", *mmdebstrap_command(base, partial)], f"making the {base.role} base")
        partial.rename(tarball)
        print(
            f"[ksched image] {base.role} base made in {time.monotonic() - started:.0f} s: {tarball}",
            file=sys.stderr,
        )
    container = run(["buildah", "from", "scratch"], "starting the base").strip()
    try:
        run(["buildah", "add", container, str(tarball), "/"], f"unpacking the {base.role} base")
        run(
            ["buildah", "config", "--env", f"PATH={BASE_PATH}", "--created-by", base.description, container],
            "describing the base",
        )
        run(["buildah", "commit", "--quiet", container, base.tag], f"committing {base.tag}")
    finally:
        subprocess.run(["buildah", "rm", container], capture_output=True, check=False)
    return base.tag
