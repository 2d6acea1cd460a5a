"""``ksched image build``: the image of the checkout, built, reported and started once.

Owns staging the build context (the checkout's files as git lists them, tracked
or not but never ignored, so build outputs such as ``target/`` and the
extension built in place stay out), the builder's command line (Docker with the
Dockerfile's default bases; buildah with the cached Debian bases as build
arguments, the host's network, and the host's CA bundle and pip configuration
mounted read-only into each RUN step so that a build reaches the package
registries exactly as this machine does, without them entering a layer), and
the check that the built image starts: ``ksched --version`` as the image's
non-root user on a read-only root filesystem. Never: pushes the image anywhere.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ksched.cluster.image import bases, layers
from ksched.cluster.image.tools import Builder, ImageError, choose_builder, run

DOCKERFILE = Path("deploy") / "Dockerfile"
# The image's user (deploy/Dockerfile's USER), under which the start is checked.
IMAGE_USER = "10001:10001"
# Read-only bind mounts of each buildah RUN step, where the host has them: the CA
# bundle (a machine behind a TLS-inspecting proxy trusts its CA there) and pip's
# site configuration (its index and certificate settings).
HOST_BUILD_FILES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pip.conf")


@dataclass(frozen=True)
class BuildResult:
    builder: Builder
    tag: str
    bases_s: float
    build_s: float
    version: str
    report: layers.ImageReport


def source_root(start: Path) -> Path:
    """The checkout holding ``start``: the nearest folder up with deploy/Dockerfile and Cargo.toml."""
    for folder in (start.resolve(), *start.resolve().parents):
        if (folder / DOCKERFILE).is_file() and (folder / "Cargo.toml").is_file():
            return folder
    raise ImageError(f"no ksched checkout (deploy/Dockerfile beside Cargo.toml) at or above {start}")


def context_files(root: Path) -> list[str]:
    """The checkout's files as git lists them (tracked and untracked, not ignored) that exist."""
    proc = subprocess.run(
        ["git", "-C", str(root), "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        capture_output=True,
        check=False,
    )
    if proc.returncode != 0:
        raise ImageError(f"{root} is not a git checkout: {proc.stderr.decode().strip()}")
    names = sorted({name for name in proc.stdout.decode().split("\0") if name})
    return [name for name in names if (root / name).is_file() or (root / name).is_symlink()]


def stage_context(root: Path, into: Path) -> None:
    for name in context_files(root):
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / name, target, follow_symlinks=False)


def docker_build_command(tag: str, context: Path) -> list[str]:
    return ["docker", "build", "-f", str(context / DOCKERFILE), "-t", tag, str(context)]


def buildah_build_command(
    tag: str, context: Path, builder_base: str, runtime_base: str, host_files: list[str]
) -> list[str]:
    cmd = ["buildah", "build", "--layers", "--pull=never", "--network", "host"]
    for path in host_files:
        cmd += ["--volume", f"{path}:{path}:ro"]
    cmd += ["--build-arg", f"BUILDER_IMAGE={builder_base}", "--build-arg", f"RUNTIME_IMAGE={runtime_base}"]
    return [*cmd, "-f", str(context / DOCKERFILE), "-t", tag, str(context)]


def runtime_spec(spec: dict[str, Any], rootfs: str, env: list[str], command: list[str]) -> dict[str, Any]:
    """``runc spec``'s default (new namespaces, the network one holding only loopback)
    made to run ``command`` in ``rootfs``, read-only, as the image's user with its env."""
    uid, gid = (int(part) for part in IMAGE_USER.split(":"))
    process = {**spec["process"], "terminal": False, "args": command, "env": env, "cwd": "/"}
    process["user"] = {"uid": uid, "gid": gid}
    return {**spec, "process": process, "root": {"path": rootfs, "readonly": True}}


def _run_with_runc(tag: str, command: list[str]) -> str:
    inspect = json.loads(run(["buildah", "inspect", "--type", "image", tag], f"inspecting {tag}"))
    env = inspect["OCIv1"]["config"].get("Env", [])
    container = run(["buildah", "from", "--pull=never", tag], f"starting {tag}").strip()
    try:
        rootfs = run(["buildah", "mount", container], f"mounting {tag}").strip()
        with tempfile.TemporaryDirectory(prefix="ksched-image-run-") as bundle:
            run(["runc", "spec", "--bundle", bundle], "writing a runtime spec")
            config = Path(bundle) / "config.json"
            config.write_text(json.dumps(runtime_spec(json.loads(config.read_text()), rootfs, env, command)))
            name = f"{Path(bundle).name}-{os.getpid()}"
            return run(["runc", "run", "--bundle", bundle, name], f"running {command[0]} in {tag}")
    finally:
        subprocess.run(["buildah", "umount", container], capture_output=True, check=False)
        subprocess.run(["buildah", "rm", container], capture_output=True, check=False)


def run_in_image(builder: Builder, tag: str, command: list[str]) -> str:
    """``command``'s output, run in the image as its user, with a read-only root filesystem
    (as the Deployment runs it) and no network but loopback: with Docker, or with runc on
    the image's root filesystem as buildah mounts it."""
    if builder == "docker":
        docker = ["docker", "run", "--rm", "--read-only", "--network", "none", "--user", IMAGE_USER]
        return run([*docker, "--entrypoint", command[0], tag, *command[1:]], f"running {command[0]} in {tag}")
    return _run_with_runc(tag, command)


def read_layers(builder: Builder, tag: str) -> tuple[layers.Layer, ...]:
    if builder == "docker":
        history = run(
            ["docker", "history", "--human=false", "--no-trunc", "--format", "{{json .}}", tag],
            f"reading {tag}'s history",
        )
        return layers.from_docker_history(history)
    inspect = json.loads(run(["buildah", "inspect", "--type", "image", tag], f"inspecting {tag}"))
    return layers.from_buildah_inspect(inspect)


def reference(builder: Builder, tag: str) -> str:
    """The name a container runtime knows ``tag`` by once imported (what a manifest's
    ``image:`` says): buildah names an image without a registry ``localhost/NAME``; Docker's
    own names are already what the kubelet asks for."""
    first = tag.split("/", 1)[0]
    if builder == "docker" or ("/" in tag and ("." in first or ":" in first or first == "localhost")):
        return tag
    return f"localhost/{tag}"


def containerd_name(image: str) -> str:
    """``image`` as containerd lists it (Docker's normalisation of a short name)."""
    first = image.split("/", 1)[0]
    if "/" in image and ("." in first or ":" in first or first == "localhost"):
        return image
    return f"docker.io/{image}" if "/" in image else f"docker.io/library/{image}"


def export_archive(builder: Builder, tag: str, into: Path) -> tuple[Path, str]:
    """``tag`` written as an archive that ``ctr images import`` reads, and its reference."""
    ref = reference(builder, tag)
    out = into / "image.tar"
    if builder == "docker":
        run(["docker", "save", "-o", str(out), tag], f"saving {tag}")
    else:
        run(["buildah", "push", "--quiet", tag, f"oci-archive:{out}:{ref}"], f"exporting {tag}")
    return out, ref


PREBUILT_PREFIX = "prebuilt."


def stage_wheels(wheels: Path, context: Path) -> list[str]:
    """Put the ksched wheels of ``wheels`` in the context, where the Dockerfile's builder stage
    packs them instead of compiling the engine (``prebuilt.<wheel's own name>``)."""
    found = sorted(wheels.glob("ksched-*.whl"))
    if len(found) != 1:
        raise ImageError(
            f"{wheels} must hold one ksched wheel (maturin build --release --out {wheels}), not {len(found)}"
        )
    shutil.copy2(found[0], context / f"{PREBUILT_PREFIX}{found[0].name}")
    return [found[0].name]


def build_image(
    tag: str, source: Path, asked: Builder | None = None, wheels: Path | None = None
) -> BuildResult:
    """Build ``deploy/Dockerfile`` of the checkout at ``source`` as ``tag``, then start it once.

    With ``wheels`` (a folder holding the checkout's wheel, built on a host whose glibc is no
    newer than the runtime base's) the engine is not compiled again in the builder stage."""
    root = source_root(source)
    builder = choose_builder(asked)
    started = time.monotonic()
    builder_base = runtime_base = ""
    if builder == "buildah":
        cache = bases.images_cache()
        builder_base = bases.ensure_base(bases.BUILDER_BASE, cache)
        runtime_base = bases.ensure_base(bases.RUNTIME_BASE, cache)
    bases_s = time.monotonic() - started
    with tempfile.TemporaryDirectory(prefix="ksched-image-") as staged:
        context = Path(staged)
        stage_context(root, context)
        if wheels is not None:
            stage_wheels(wheels, context)
        started = time.monotonic()
        if builder == "docker":
            cmd = docker_build_command(tag, context)
        else:
            host_files = [path for path in HOST_BUILD_FILES if Path(path).is_file()]
            cmd = buildah_build_command(tag, context, builder_base, runtime_base, host_files)
        run(["nice", "-n", "19", *cmd], f"building {tag}", stream=True)
        build_s = time.monotonic() - started
    version = run_in_image(builder, tag, ["ksched", "--version"]).strip()
    packages = layers.parse_package_sizes(
        run_in_image(builder, tag, ["python3", "-c", layers.PACKAGE_SIZES_SCRIPT])
    )
    report = layers.ImageReport(tag, read_layers(builder, tag), packages)
    print(f"[ksched image] {tag} starts: {version}", file=sys.stderr)
    return BuildResult(builder, tag, bases_s, build_s, version, report)
