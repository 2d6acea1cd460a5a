"""``ksched image build``'s pure parts: the builders' command lines, the staged context, the bases' keys."""

from __future__ import annotations

import ast
import os
import re
import subprocess
from pathlib import Path

import pytest

from ksched.cluster.image import bases, build, tools
from ksched.commands.cli import parser


def test_buildah_builds_the_dockerfile_on_the_local_bases_with_the_hosts_trust_mounted() -> None:
    context = Path("/tmp/ctx")
    cmd = build.buildah_build_command(
        "ksched:dev", context, "localhost/b:1", "localhost/r:1", ["/etc/ssl/certs/ca-certificates.crt"]
    )
    assert cmd[:2] == ["buildah", "build"]
    assert "--pull=never" in cmd
    assert cmd[cmd.index("--network") + 1] == "host"
    assert cmd[cmd.index("--volume") + 1] == (
        "/etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro"
    )
    build_args = [cmd[i + 1] for i, arg in enumerate(cmd) if arg == "--build-arg"]
    assert build_args == ["BUILDER_IMAGE=localhost/b:1", "RUNTIME_IMAGE=localhost/r:1"]
    assert cmd[-5:] == ["-f", "/tmp/ctx/deploy/Dockerfile", "-t", "ksched:dev", "/tmp/ctx"]


def test_docker_builds_with_the_dockerfiles_own_bases() -> None:
    cmd = build.docker_build_command("ksched:dev", Path("/tmp/ctx"))
    assert cmd == ["docker", "build", "-f", "/tmp/ctx/deploy/Dockerfile", "-t", "ksched:dev", "/tmp/ctx"]


def test_the_dockerfile_takes_both_bases_as_build_arguments_defaulting_to_the_official_tags() -> None:
    dockerfile = (Path(__file__).parents[2] / "deploy" / "Dockerfile").read_text()
    assert "ARG BUILDER_IMAGE=rust:1.95-slim-bookworm" in dockerfile
    assert "ARG RUNTIME_IMAGE=python:3.11-slim-bookworm" in dockerfile
    froms = [line.split()[1] for line in dockerfile.splitlines() if line.startswith("FROM ")]
    assert froms == ["${BUILDER_IMAGE}", "${RUNTIME_IMAGE}", "${RUNTIME_IMAGE}"]


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def test_the_context_holds_tracked_and_new_files_but_nothing_git_ignores(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "deploy").mkdir(parents=True)
    (repo / "deploy" / "Dockerfile").write_text("FROM scratch\n")
    (repo / "Cargo.toml").write_text("[workspace]\n")
    (repo / ".gitignore").write_text("/target\n*.so\n")
    (repo / "python").mkdir()
    (repo / "python" / "_core.abi3.so").write_text("stale build output")
    (repo / "target").mkdir()
    (repo / "target" / "big").write_text("x")
    (repo / "gone.txt").write_text("tracked, then deleted")
    _git(repo, "init", "-q")
    _git(repo, "add", "deploy", "Cargo.toml", ".gitignore", "gone.txt")
    (repo / "gone.txt").unlink()
    (repo / "python" / "new.py").write_text("print('new')\n")

    assert build.source_root(repo / "python") == repo.resolve()
    staged = tmp_path / "staged"
    build.stage_context(repo, staged)
    files = sorted(str(p.relative_to(staged)) for p in staged.rglob("*") if p.is_file())
    assert files == [".gitignore", "Cargo.toml", "deploy/Dockerfile", "python/new.py"]


def test_a_folder_outside_a_checkout_is_refused(tmp_path: Path) -> None:
    with pytest.raises(tools.ImageError, match="no ksched checkout"):
        build.source_root(tmp_path)


def test_a_base_is_keyed_by_its_suite_and_packages_in_any_order() -> None:
    base = bases.DebianBase("runtime", "bookworm", ("python3", "ca-certificates"))
    same = bases.DebianBase("runtime", "bookworm", ("ca-certificates", "python3"))
    other_suite = bases.DebianBase("runtime", "trixie", ("python3", "ca-certificates"))
    more = bases.DebianBase("runtime", "bookworm", ("python3", "ca-certificates", "tini"))
    assert base.key == same.key
    assert len({base.key, other_suite.key, more.key}) == 3
    assert base.tag == f"localhost/ksched-base-runtime:bookworm-{base.key}"
    assert base.tarball(Path("/cache")) == Path(f"/cache/runtime-bookworm-{base.key}.tar")


def test_mmdebstrap_makes_a_minbase_with_the_packages_and_without_docs() -> None:
    cmd = bases.mmdebstrap_command(bases.RUNTIME_BASE, Path("/cache/r.tar"))
    assert cmd[0] == "mmdebstrap"
    assert "--variant=minbase" in cmd
    assert f"--hook-dir={bases.MERGED_USR_HOOKS}" in cmd
    assert "--include=python3,python3-venv,ca-certificates" in cmd
    assert "--dpkgopt=path-exclude=/usr/share/doc/*" in cmd
    assert cmd[-2:] == ["bookworm", "/cache/r.tar"]
    assert not any("://" in arg for arg in cmd), "the mirror is mmdebstrap's default"


def test_docker_is_chosen_when_its_daemon_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tools, "docker_answers", lambda: None)
    assert tools.choose_builder(None) == "docker"


def test_without_docker_or_a_way_to_install_buildah_the_error_says_both_and_how(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tools, "docker_answers", lambda: "`docker info` failed: Cannot connect")
    monkeypatch.setattr(tools, "missing_buildah_commands", lambda: ["buildah", "mmdebstrap"])
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(tools.ImageError) as err:
        tools.choose_builder(None)
    message = str(err.value)
    assert "neither Docker nor buildah" in message
    assert "Cannot connect" in message
    assert "apt-get install buildah mmdebstrap runc" in message


def test_asking_for_docker_where_it_does_not_answer_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tools, "docker_answers", lambda: "docker is not installed")
    with pytest.raises(tools.ImageError, match="Docker cannot build here: docker is not installed"):
        tools.choose_builder("docker")


def test_the_command_line_defaults_to_the_packages_version_as_tag() -> None:
    args = parser().parse_args(["image", "build"])
    assert args.tag.startswith("ksched:")
    assert args.builder is None
    args = parser().parse_args(["image", "build", "--tag", "ksched:dev", "--builder", "buildah"])
    assert (args.tag, args.builder) == ("ksched:dev", "buildah")


def test_the_image_runs_read_only_as_its_user_with_its_own_env() -> None:
    default = {
        "ociVersion": "1.0.2",
        "process": {"terminal": True, "user": {"uid": 0, "gid": 0}, "args": ["sh"], "env": [], "cwd": "/"},
        "root": {"path": "rootfs", "readonly": False},
        "linux": {"namespaces": [{"type": "network"}]},
    }
    spec = build.runtime_spec(default, "/mnt/img", ["PATH=/opt/ksched/bin:/usr/bin"], ["ksched", "--version"])
    assert spec["root"] == {"path": "/mnt/img", "readonly": True}
    assert spec["process"]["user"] == {"uid": 10001, "gid": 10001}
    assert spec["process"]["args"] == ["ksched", "--version"]
    assert spec["process"]["env"] == ["PATH=/opt/ksched/bin:/usr/bin"]
    assert spec["process"]["terminal"] is False
    assert spec["linux"] == default["linux"], "runc's own namespaces (a network of loopback only) stay"


def _pruned_modules(dockerfile: str) -> set[str]:
    """The modules the Dockerfile's venv stage removes: packages it uninstalls (as import
    names) and subpackages it deletes from site-packages."""
    text = dockerfile.replace("\\\n", " ")
    uninstalled = re.search(r"pip uninstall -y (.+?)&&", text)
    assert uninstalled, "the venv stage uninstalls what ksched does not need"
    modules = {name.replace("-", "_") for name in uninstalled.group(1).split()}
    modules |= {path.replace("/", ".") for path in re.findall(r"site-packages/([\w/]+)", text)}
    return modules


def test_the_image_prunes_nothing_that_ksched_imports() -> None:
    root = Path(__file__).parents[2]
    pruned = _pruned_modules((root / "deploy" / "Dockerfile").read_text())
    assert {"pip", "aiohttp", "kubernetes.aio"} <= pruned
    imported: set[str] = set()
    for path in (root / "python" / "ksched").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module)
    clashes = {name for name in imported for gone in pruned if name == gone or name.startswith(f"{gone}.")}
    assert clashes == set()
