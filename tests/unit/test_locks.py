"""The hash-checked locks (requirements/*.lock, made by requirements/update.sh) hold what
pyproject.toml asks for: a lock that fell behind a new or raised dependency would install
something else than the code needs, or fail only when the image is built."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
LOCKS = ROOT / "requirements"
PIN = re.compile(r"^([A-Za-z0-9_.-]+)==(\S+) \\\n((?:    --hash=sha256:[0-9a-f]{64}(?: \\)?\n)+)", re.M)


def pins(name: str) -> dict[str, str]:
    """Each package of the lock and its pinned version; every pin carries at least one hash."""
    text = (LOCKS / name).read_text()
    found = {canonicalize_name(m[1]): m[2] for m in PIN.finditer(text)}
    listed = re.findall(r"^([A-Za-z0-9_.-]+)==", text, re.M)
    assert len(found) == len(listed), f"{name}: a pin without a sha256 hash"
    return found


def pyproject() -> dict[str, object]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)


def satisfied(requirements: list[str], lock: str) -> None:
    locked = pins(lock)
    for line in requirements:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate():
            continue
        name = canonicalize_name(req.name)
        assert name in locked, f"{lock} lacks {req.name}: run bash requirements/update.sh"
        assert req.specifier.contains(locked[name], prereleases=True), (
            f"{lock} pins {req.name}=={locked[name]}, outside {req.specifier}: run bash requirements/update.sh"
        )


def test_the_runtime_lock_holds_every_dependency() -> None:
    project = pyproject()["project"]
    assert isinstance(project, dict)
    satisfied(project["dependencies"], "runtime.lock")


def test_the_dev_lock_holds_the_dev_extra_at_the_runtime_and_build_pins() -> None:
    project = pyproject()["project"]
    assert isinstance(project, dict)
    satisfied(project["optional-dependencies"]["dev"], "dev.lock")
    satisfied(project["dependencies"], "dev.lock")
    dev = pins("dev.lock")
    for lock in ("runtime.lock", "build.lock"):
        for name, version in pins(lock).items():
            if name in dev:
                assert dev[name] == version, f"dev.lock pins {name}=={dev[name]}, {lock} {version}"


def test_the_build_lock_holds_the_build_backend() -> None:
    system = pyproject()["build-system"]
    assert isinstance(system, dict)
    satisfied(system["requires"], "build.lock")
    assert "pip" in pins("build.lock")


@pytest.mark.parametrize(
    ("path", "lock"),
    [
        ("deploy/Dockerfile", "requirements/build.lock"),
        ("deploy/Dockerfile", "requirements/runtime.lock"),
        ("tests/setup_env.sh", "requirements/build.lock"),
        ("tests/setup_env.sh", "requirements/dev.lock"),
        ("tests/test_wheel.sh", "requirements/runtime.lock"),
    ],
)
def test_installs_read_the_locks_with_hashes_required(path: str, lock: str) -> None:
    """Each install of dependencies names its lock with --require-hashes, and ksched's own
    package is installed with --no-deps, so nothing is resolved outside the locks."""
    text = (ROOT / path).read_text()
    name = Path(lock).name
    assert re.search(rf"--require-hashes -r \S*{re.escape(name)}", text), f"{path} does not install {lock}"
    installs = re.findall(r"pip\"? install (.*)", text)
    for args in installs:
        assert "--require-hashes" in args or "--no-deps" in args, f"{path}: unlocked install: {args}"
