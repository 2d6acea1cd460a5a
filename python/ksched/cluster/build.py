"""Build the local control plane from Go modules and cache the binaries.

Owns: the version pins of kube-apiserver, kube-scheduler, kubectl, kubelet,
kube-proxy, etcd and KWOK, and the cache under ``~/.cache/ksched/<pins>/bin``; also the pins of helm
(the chart tests use it), of metrics-server (the load simulation serves the
resource metrics API with it) and of the descheduler (``ksched bench --quality`` runs it
beside kube-scheduler), each with its own cache
``~/.cache/ksched/<name>-<version>/bin``, kept apart so that moving one pin
never rebuilds the others.  Promises: a
binary is rebuilt only when its pin changes; a failed build raises
:class:`BuildError` carrying the go tool's own output.  Never: downloads a
release binary — everything is compiled with the local ``go`` toolchain
(``GOTOOLCHAIN=local``) from modules fetched through the Go module proxy.

Runs with the standard library only, so ``python -m ksched.cluster.build``
works before the package's dependencies are installed.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

KUBERNETES_VERSION = "v1.36.3"
ETCD_VERSION = "v3.6.16"
KWOK_VERSION = "v0.8.0"
HELM_VERSION = "v3.22.0"
# metrics-server v0.9 is built against the k8s.io v0.36 libraries, as the control plane is.
METRICS_SERVER_VERSION = "v0.9.0"
# descheduler v0.36 requires the k8s.io v0.36 libraries and uses the policy/v1 Eviction API.
DESCHEDULER_VERSION = "v0.36.0"
# k8s.io/kubernetes v1.36 declares `go 1.26.0` in its go.mod; older Go cannot build it.
MIN_GO = (1, 26)

# kubelet and kube-proxy run the real nodes of `ksched cluster up --real-nodes`.
KUBERNETES_COMMANDS = (
    "kube-apiserver",
    "kube-scheduler",
    "kube-controller-manager",
    "kubectl",
    "kubelet",
    "kube-proxy",
)
COMPONENTS = (*KUBERNETES_COMMANDS, "etcd", "kwok")
HELM = "helm"
METRICS_SERVER = "metrics-server"
DESCHEDULER = "descheduler"
DESCHEDULER_MODULE = "sigs.k8s.io/descheduler"


class BuildError(RuntimeError):
    """A control-plane component could not be built; the message says why."""


@dataclass(frozen=True)
class Pins:
    kubernetes: str = KUBERNETES_VERSION
    etcd: str = ETCD_VERSION
    kwok: str = KWOK_VERSION
    helm: str = HELM_VERSION
    metrics_server: str = METRICS_SERVER_VERSION
    descheduler: str = DESCHEDULER_VERSION

    @property
    def key(self) -> str:
        """The control plane's cache directory; helm, metrics-server and the descheduler
        have their own (:func:`helm_binary`, :func:`metrics_server_binary`,
        :func:`descheduler_binary`)."""
        return f"k8s-{self.kubernetes}_etcd-{self.etcd}_kwok-{self.kwok}"


def cache_root() -> Path:
    base = os.environ.get("KSCHED_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "ksched"
    )
    return Path(base)


def bin_dir(pins: Pins = Pins()) -> Path:
    return cache_root() / pins.key / "bin"


def helm_binary(pins: Pins = Pins()) -> Path:
    return cache_root() / f"helm-{pins.helm}" / "bin" / HELM


def metrics_server_binary(pins: Pins = Pins()) -> Path:
    return cache_root() / f"{METRICS_SERVER}-{pins.metrics_server}" / "bin" / METRICS_SERVER


def descheduler_binary(pins: Pins = Pins()) -> Path:
    return cache_root() / f"{DESCHEDULER}-{pins.descheduler}" / "bin" / DESCHEDULER


# The null binder of `ksched bench --cluster`: Go source shipped inside the package.
NULLBINDER_SOURCE = Path(__file__).with_name("nullbinder")
NULLBINDER = "nullbinder"


def nullbinder_binary(pins: Pins = Pins()) -> Path:
    """The null binder, named by a digest of its source so that a changed source is rebuilt."""
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum", "main.go"):
        digest.update((NULLBINDER_SOURCE / name).read_bytes())
    return bin_dir(pins) / f"{NULLBINDER}-{digest.hexdigest()[:12]}"


def build_nullbinder(pins: Pins, work: Path) -> None:
    """``go build`` of the null binder against client-go v0.<minor>.<patch> of the pinned Kubernetes."""
    mod = work / NULLBINDER
    shutil.rmtree(mod, ignore_errors=True)
    shutil.copytree(NULLBINDER_SOURCE, mod)
    run_command(
        ["go", "build", "-trimpath", "-ldflags", "-s -w", "-o", str(nullbinder_binary(pins)), "."],
        mod,
        "building the null binder",
    )


def missing_binaries(
    pins: Pins = Pins(),
    with_helm: bool = True,
    with_metrics_server: bool = False,
    with_descheduler: bool = False,
) -> list[str]:
    bdir = bin_dir(pins)
    missing = [name for name in COMPONENTS if not (bdir / name).is_file()]
    if not nullbinder_binary(pins).is_file():
        missing.append(NULLBINDER)
    if with_helm and not helm_binary(pins).is_file():
        missing.append(HELM)
    if with_metrics_server and not metrics_server_binary(pins).is_file():
        missing.append(METRICS_SERVER)
    if with_descheduler and not descheduler_binary(pins).is_file():
        missing.append(DESCHEDULER)
    return missing


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    env["GOTOOLCHAIN"] = "local"
    env.setdefault("CGO_ENABLED", "0")
    env.setdefault("GOFLAGS", "-buildvcs=false")
    return env


def check_go() -> str:
    """Return `go version` output, or raise naming the version needed."""
    need = f"go{MIN_GO[0]}.{MIN_GO[1]}"
    go = shutil.which("go")
    if go is None:
        raise BuildError(
            f"Go is not installed: building the local control plane needs {need} or newer "
            "(install Go and put `go` on PATH)"
        )
    out = subprocess.run(
        [go, "version"], capture_output=True, text=True, env=_go_env(), check=False
    ).stdout.strip()
    match = re.search(r"go(\d+)\.(\d+)", out)
    if match is None or (int(match.group(1)), int(match.group(2))) < MIN_GO:
        raise BuildError(
            f"Go is too old ({out or 'unknown version'}): Kubernetes {KUBERNETES_VERSION} "
            f"needs {need} or newer"
        )
    return out


def run_command(cmd: list[str], cwd: Path, what: str) -> None:
    """Run one build step with the Go environment of every build here, saying ``what`` on
    stderr; raises :class:`BuildError` with the tail of its output when it fails."""
    print(f"[ksched build] {what}: {' '.join(cmd)}", file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, cwd=cwd, env=_go_env(), capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr)[-6000:]
        raise BuildError(f"{what} failed (exit {proc.returncode}):\n{tail}")


def _staging_replaces(kubernetes_gomod: str, kubernetes_version: str) -> list[str]:
    """Every `k8s.io/* v0.0.0` requirement of k8s.io/kubernetes, mapped to v0.<minor>.<patch>."""
    staging_version = "v0." + kubernetes_version.removeprefix("v1.")
    modules = sorted(set(re.findall(r"^\s*(k8s\.io/[\w./-]+) v0\.0\.0\s*$", kubernetes_gomod, re.M)))
    if not modules:
        raise BuildError("k8s.io/kubernetes go.mod lists no staging modules; cannot build")
    return [f"replace {m} => {m} {staging_version}" for m in modules]


def _module_gomod(module: str, version: str, work: Path) -> str:
    """The go.mod of ``module@version``, downloaded through the module proxy."""
    proc = subprocess.run(
        ["go", "mod", "download", "-json", f"{module}@{version}"],
        cwd=work,
        env=_go_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    match = re.search(r'"GoMod":\s*"([^"]+)"', proc.stdout)
    if proc.returncode != 0 or match is None:
        raise BuildError(f"downloading {module}@{version} failed:\n{proc.stdout}{proc.stderr}")
    return Path(match.group(1)).read_text()


def build_kubernetes(pins: Pins, out: Path, work: Path) -> None:
    mod = work / "kubernetes"
    mod.mkdir(parents=True, exist_ok=True)
    gomod = _module_gomod("k8s.io/kubernetes", pins.kubernetes, mod)
    go_directive = re.search(r"^go (\S+)", gomod, re.M)
    lines = [
        "module ksched.local/kubernetes-build",
        "",
        f"go {go_directive.group(1) if go_directive else '1.26.0'}",
        "",
        f"require k8s.io/kubernetes {pins.kubernetes}",
        "",
        *_staging_replaces(gomod, pins.kubernetes),
        "",
    ]
    (mod / "go.mod").write_text("\n".join(lines))
    packages = [f"k8s.io/kubernetes/cmd/{c}" for c in KUBERNETES_COMMANDS]
    run_command(
        ["go", "get", *[f"{p}@{pins.kubernetes}" for p in packages]], mod, "resolving Kubernetes modules"
    )
    major, minor = pins.kubernetes.removeprefix("v").split(".")[:2]
    build_date = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    ldflags = []
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        ldflags += [
            f"-X {pkg}.gitVersion={pins.kubernetes}",
            f"-X {pkg}.gitMajor={major}",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
            f"-X {pkg}.buildDate={build_date}",
        ]
    run_command(
        ["go", "build", "-trimpath", "-ldflags", "-s -w " + " ".join(ldflags), "-o", str(out), *packages],
        mod,
        f"building {', '.join(KUBERNETES_COMMANDS)}",
    )


ETCD_MAIN = """package main

import (
\t"os"

\t"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
\tetcdmain.Main(os.Args)
}
"""


def build_etcd(pins: Pins, out: Path, work: Path) -> None:
    mod = work / "etcd"
    mod.mkdir(parents=True, exist_ok=True)
    (mod / "go.mod").write_text(
        f"module ksched.local/etcd-build\n\ngo 1.24\n\nrequire go.etcd.io/etcd/server/v3 {pins.etcd}\n"
    )
    (mod / "main.go").write_text(ETCD_MAIN)
    run_command(["go", "mod", "tidy"], mod, "resolving etcd modules")
    ldflags = f"-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=ksched-{pins.etcd}"
    run_command(
        ["go", "build", "-trimpath", "-ldflags", ldflags, "-o", str(out / "etcd"), "."], mod, "building etcd"
    )


def _go_install(package: str, ldflags: str, out: Path, work: Path, what: str) -> None:
    """``go install package`` (a ``path@version``, built in module mode) with its binary written to ``out``."""
    cmd = ["go", "install", "-trimpath", "-ldflags", ldflags, package]
    print(f"[ksched build] {what}: {' '.join(cmd)}", file=sys.stderr, flush=True)
    proc = subprocess.run(
        cmd, cwd=work, env={**_go_env(), "GOBIN": str(out)}, capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise BuildError(f"{what} failed (exit {proc.returncode}):\n{(proc.stdout + proc.stderr)[-6000:]}")


def build_kwok(pins: Pins, out: Path, work: Path) -> None:
    _go_install(f"sigs.k8s.io/kwok/cmd/kwok@{pins.kwok}", "-s -w", out, work, "building kwok")


def build_helm(pins: Pins, work: Path) -> None:
    """helm, stamped as its Makefile stamps a release.

    The Makefile sets the version and the Kubernetes version that `helm template`
    and `helm lint` assume when no cluster is asked (derived from client-go:
    v0.37 is 1.37); without them helm reports itself as unreleased and assumes 1.20.
    """
    gomod = _module_gomod("helm.sh/helm/v3", pins.helm, work)
    client_go = re.search(r"^\s*k8s\.io/client-go v0\.(\d+)\.", gomod, re.M)
    if client_go is None:
        raise BuildError(f"helm.sh/helm/v3@{pins.helm} go.mod does not require k8s.io/client-go")
    ldflags = ["-s -w", f"-X helm.sh/helm/v3/internal/version.version={pins.helm}"]
    ldflags.append("-X helm.sh/helm/v3/internal/version.gitTreeState=clean")
    for pkg in ("helm.sh/helm/v3/pkg/lint/rules", "helm.sh/helm/v3/pkg/chartutil"):
        ldflags += [f"-X {pkg}.k8sVersionMajor=1", f"-X {pkg}.k8sVersionMinor={client_go.group(1)}"]
    out = helm_binary(pins).parent
    out.mkdir(parents=True, exist_ok=True)
    _go_install(f"helm.sh/helm/v3/cmd/helm@{pins.helm}", " ".join(ldflags), out, work, "building helm")


def build_metrics_server(pins: Pins, work: Path) -> None:
    """metrics-server, stamped with its version as its Makefile stamps a release."""
    build_date = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    ldflags = [
        "-s -w",
        f"-X k8s.io/client-go/pkg/version.gitVersion={pins.metrics_server}",
        f"-X k8s.io/client-go/pkg/version.buildDate={build_date}",
    ]
    out = metrics_server_binary(pins).parent
    out.mkdir(parents=True, exist_ok=True)
    _go_install(
        f"sigs.k8s.io/metrics-server/cmd/metrics-server@{pins.metrics_server}",
        " ".join(ldflags),
        out,
        work,
        "building metrics-server",
    )


def _replaces(gomod: str) -> list[str]:
    """A go.mod's replace directives, one a line (``replace a => b v``), single or in a block."""
    single = re.findall(r"^replace\s+(\S.*=>.*\S)\s*$", gomod, re.M)
    blocks = re.findall(r"^replace\s*\(\n(.*?)^\)", gomod, re.M | re.S)
    lines = [line.strip() for block in blocks for line in block.splitlines() if "=>" in line]
    return [f"replace {r}" for r in (*single, *lines)]


def build_descheduler(pins: Pins, work: Path) -> None:
    """The descheduler, stamped with its version as its Makefile stamps a release.

    Its go.mod replaces a module (k8s.io/kube-openapi), which ``go install path@version``
    refuses, so it is built from a module of our own that requires it and repeats its
    replace directives.
    """
    mod = work / DESCHEDULER
    mod.mkdir(parents=True, exist_ok=True)
    gomod = _module_gomod(DESCHEDULER_MODULE, pins.descheduler, mod)
    go_directive = re.search(r"^go (\S+)", gomod, re.M)
    lines = [
        "module ksched.local/descheduler-build",
        "",
        f"go {go_directive.group(1) if go_directive else '1.26.0'}",
        "",
        f"require {DESCHEDULER_MODULE} {pins.descheduler}",
        "",
        *_replaces(gomod),
        "",
    ]
    (mod / "go.mod").write_text("\n".join(lines))
    package = f"{DESCHEDULER_MODULE}/cmd/{DESCHEDULER}"
    run_command(["go", "get", f"{package}@{pins.descheduler}"], mod, "resolving descheduler modules")
    build_date = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    # Its Makefile's shape, v<date>-<tag>: the descheduler reads its minor version from it to
    # check the skew with the API server's, and warns on any other shape.
    stamped = f"v{time.strftime('%Y%m%d', time.gmtime())}-{pins.descheduler}"
    ldflags = [
        "-s -w",
        f"-X {DESCHEDULER_MODULE}/pkg/version.version={stamped}",
        f"-X {DESCHEDULER_MODULE}/pkg/version.buildDate={build_date}",
    ]
    out = descheduler_binary(pins)
    out.parent.mkdir(parents=True, exist_ok=True)
    run_command(
        ["go", "build", "-trimpath", "-ldflags", " ".join(ldflags), "-o", str(out), package],
        mod,
        "building the descheduler",
    )


def ensure_built(
    pins: Pins = Pins(),
    with_helm: bool = True,
    with_metrics_server: bool = False,
    with_descheduler: bool = False,
) -> Path:
    """Build whatever is missing from the cache (helm too unless ``with_helm`` is false,
    metrics-server only with ``with_metrics_server``, the descheduler only with
    ``with_descheduler``: the control plane runs without them) and return the control
    plane's bin directory."""
    out = bin_dir(pins)
    missing = missing_binaries(pins, with_helm, with_metrics_server, with_descheduler)
    if not missing:
        return out
    check_go()
    out.mkdir(parents=True, exist_ok=True)
    work = out.parent / "src"
    work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    if set(KUBERNETES_COMMANDS) & set(missing):
        build_kubernetes(pins, out, work)
    if "etcd" in missing:
        build_etcd(pins, out, work)
    if "kwok" in missing:
        build_kwok(pins, out, work)
    if NULLBINDER in missing:
        build_nullbinder(pins, work)
    if HELM in missing:
        build_helm(pins, work)
    if METRICS_SERVER in missing:
        build_metrics_server(pins, work)
    if DESCHEDULER in missing:
        build_descheduler(pins, work)
    still = missing_binaries(pins, with_helm, with_metrics_server, with_descheduler)
    if still:
        raise BuildError(f"build finished but these binaries are missing: {', '.join(still)}")
    apart = [
        str(binary.parent)
        for name, binary in (
            (HELM, helm_binary(pins)),
            (METRICS_SERVER, metrics_server_binary(pins)),
            (DESCHEDULER, descheduler_binary(pins)),
        )
        if name in missing
    ]
    where = " and ".join([str(out), *apart])
    print(
        f"[ksched build] built {', '.join(missing)} in {time.monotonic() - started:.0f} s into {where}",
        file=sys.stderr,
    )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the local control plane binaries from Go modules.")
    parser.add_argument("--print-bin-dir", action="store_true", help="print the cache bin directory and exit")
    parser.add_argument(
        "--print-helm", action="store_true", help="print the cached helm binary's path and exit"
    )
    args = parser.parse_args(argv)
    if args.print_bin_dir:
        print(bin_dir())
        return 0
    if args.print_helm:
        print(helm_binary())
        return 0
    try:
        print(ensure_built(with_metrics_server=True, with_descheduler=True))
    except BuildError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())


# KWOK stages (from the KWOK module itself): nodes become Ready at once and keep
# heartbeating through their lease; bound pods become Running; deleted pods go.
KWOK_STAGE_DIRS = ("node/fast", "node/heartbeat-with-lease", "pod/fast")


def kwok_stages(pins: Pins = Pins()) -> str:
    """The Stage documents of the pinned KWOK module, as one multi-document YAML."""
    proc = subprocess.run(
        ["go", "env", "GOMODCACHE"], capture_output=True, text=True, env=_go_env(), check=False
    )
    root = Path(proc.stdout.strip()) / f"sigs.k8s.io/kwok@{pins.kwok}/kustomize/stage"
    docs = []
    for sub in KWOK_STAGE_DIRS:
        for f in sorted((root / sub).glob("*.yaml")):
            if f.name != "kustomization.yaml":
                docs.append(f.read_text())
    if not docs:
        raise BuildError(
            f"KWOK stages not found under {root}: run the build again to download sigs.k8s.io/kwok@{pins.kwok}"
        )
    return "\n---\n".join(docs)
