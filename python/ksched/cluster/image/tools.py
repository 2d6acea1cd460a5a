"""Finding the image builder and running its commands.

Owns the choice between Docker and buildah (Docker when its daemon answers
``docker info``, else buildah), installing buildah, mmdebstrap and runc from
Debian's packages with apt-get when they are missing and this runs as root (as
Prometheus is installed for the local cluster), and :func:`run`, which runs one
builder command and raises :class:`ImageError` with its output's tail when it
fails. Never: starts a Docker daemon, or installs anything without root.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Sequence
from typing import Literal

from ksched.cluster.processes import apt_install
from ksched.errors import KschedError

Builder = Literal["docker", "buildah"]

# Debian's packages behind the buildah path: buildah runs the Dockerfile's RUN steps
# with an OCI runtime (runc, only recommended by buildah), mmdebstrap makes the bases.
BUILDAH_PACKAGES = ("buildah", "mmdebstrap", "runc")
BUILDAH_COMMANDS = ("buildah", "mmdebstrap", "runc")
OUTPUT_TAIL_CHARS = 4000


class ImageError(KschedError):
    """The image could not be built or inspected; the message says why and what to do."""


def shown(cmd: Sequence[str]) -> str:
    """``cmd`` as one line, each argument cut to its first line (a script is passed whole)."""
    return " ".join(arg if "\n" not in arg else arg.strip().splitlines()[0] + " ..." for arg in cmd)


def run(cmd: Sequence[str], what: str, *, stream: bool = False) -> str:
    """Run ``cmd`` and return its standard output; ``stream`` passes its output through
    to the terminal instead (a build's progress)."""
    print(f"[ksched image] {what}: {shown(cmd)}", file=sys.stderr, flush=True)
    if stream:
        proc = subprocess.run(list(cmd), stdout=sys.stderr, stderr=sys.stderr, check=False)
        if proc.returncode != 0:
            raise ImageError(f"{what} failed (exit {proc.returncode}); its output is above")
        return ""
    done = subprocess.run(list(cmd), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = (done.stdout + done.stderr)[-OUTPUT_TAIL_CHARS:]
        raise ImageError(f"{what} failed (exit {done.returncode}):\n{tail}")
    return done.stdout


def docker_answers() -> str | None:
    """None when the Docker daemon answers; otherwise why not, for the error message."""
    if shutil.which("docker") is None:
        return "docker is not installed"
    proc = subprocess.run(["docker", "info"], capture_output=True, text=True, check=False)
    if proc.returncode == 0:
        return None
    lines = [line for line in (proc.stderr or proc.stdout).splitlines() if line.strip()]
    return f"`docker info` failed: {lines[-1].strip() if lines else f'exit {proc.returncode}'}"


def missing_buildah_commands() -> list[str]:
    return [name for name in BUILDAH_COMMANDS if shutil.which(name) is None]


def install_buildah() -> None:
    """apt-get install what the buildah path lacks; raise saying how to install it by hand
    when that cannot be done here (not root, or no apt-get)."""
    missing = missing_buildah_commands()
    if not missing:
        return
    by_hand = f"apt-get install {' '.join(BUILDAH_PACKAGES)}"
    failed = apt_install(BUILDAH_PACKAGES, "the buildah path")
    if failed is not None:
        raise ImageError(
            f"{', '.join(missing)} not installed and `{by_hand}` failed ({failed}): "
            f"run it as root, or start Docker"
        )
    still = missing_buildah_commands()
    if still:
        raise ImageError(f"{', '.join(still)} still missing after `{by_hand}`")


def choose_builder(asked: Builder | None) -> Builder:
    """The builder to use: ``asked`` if given (and usable), else Docker when its daemon
    answers, else buildah (installed when missing)."""
    why_not = None
    if asked in ("docker", None):
        why_not = docker_answers()
        if why_not is None:
            return "docker"
        if asked == "docker":
            raise ImageError(f"Docker cannot build here: {why_not}")
        print(f"[ksched image] {why_not}: building with buildah", file=sys.stderr, flush=True)
    try:
        install_buildah()
    except ImageError as err:
        if why_not is not None:
            raise ImageError(f"neither Docker nor buildah can build here: {why_not}; {err}") from None
        raise
    return "buildah"
