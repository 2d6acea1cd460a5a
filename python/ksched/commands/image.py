"""``ksched image build``: the arguments of the image build, handed to :mod:`ksched.cluster.image.build`."""

from __future__ import annotations

import argparse
from pathlib import Path

from ksched import __version__
from ksched.commands.exit_codes import EXIT_OK


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    i = sub.add_parser(
        "image",
        help="build ksched's container image from this checkout",
        description="Example: ksched image build --tag ksched:dev",
    )
    isub = i.add_subparsers(dest="image_command", required=True)
    build = isub.add_parser(
        "build",
        help="build deploy/Dockerfile: with Docker where it runs, else with buildah on cached Debian bases",
        description="Builds the image of the checkout (files git lists, never ignored ones), checks that "
        "it starts (ksched --version as its user), and prints its size and the layers and packages "
        "that dominate it. Without Docker, buildah, mmdebstrap and runc are installed with apt-get "
        "when missing (as root); the Debian bases are cached under ~/.cache/ksched/images/. "
        "Example: ksched image build --tag ksched:dev",
    )
    build.add_argument(
        "--tag", default=f"ksched:{__version__}", help="the image's name (default %(default)s)"
    )
    build.add_argument(
        "--builder",
        choices=("docker", "buildah"),
        help="build with this one only (default: Docker if `docker info` answers, else buildah)",
    )
    build.add_argument(
        "--wheels",
        type=Path,
        metavar="DIR",
        help="pack the ksched wheel in DIR (maturin build --release --out DIR, on a host whose glibc "
        "is no newer than the image's) instead of compiling the engine in the build",
    )
    build.add_argument(
        "--source",
        type=Path,
        default=Path.cwd(),
        help="a folder inside the ksched checkout to build (default: the current folder)",
    )
    load = isub.add_parser(
        "load",
        help="import a built image into the real nodes of the local cluster (`cluster up --real-nodes`)",
        description="Writes the image as an archive (buildah push, or docker save) and imports it into "
        "each real node's containerd, where a pod with imagePullPolicy: Never runs it. Prints the "
        "reference to put in a manifest. Example: ksched image load --tag ksched:dev",
    )
    load.add_argument("--tag", default=f"ksched:{__version__}", help="the image's name (default %(default)s)")
    load.add_argument("--builder", choices=("docker", "buildah"), help="the builder that holds it")
    i.set_defaults(func=_image)


def _image(args: argparse.Namespace) -> int:
    from ksched.cluster.image import build, layers

    if args.image_command == "load":
        return _load(args.tag, args.builder)

    result = build.build_image(args.tag, args.source, args.builder, args.wheels)
    bases = f", bases {result.bases_s:.0f} s" if result.builder == "buildah" else ""
    print(
        f"built {result.tag} with {result.builder} in {result.build_s:.0f} s{bases}; it runs {result.version}"
    )
    print(layers.format_report(result.report))
    return EXIT_OK


def _load(tag: str, asked: str | None) -> int:
    import tempfile

    from ksched.cluster import local
    from ksched.cluster.image import build, tools

    builder: tools.Builder = (
        "docker" if asked == "docker" or (asked is None and tools.docker_answers() is None) else "buildah"
    )
    with tempfile.TemporaryDirectory(prefix="ksched-image-load-") as folder:
        archive, ref = build.export_archive(builder, tag, Path(folder))
        nodes = local.load_image(archive, build.containerd_name(ref))
    print(f"loaded {ref} into {', '.join(nodes)}: use image: {ref} with imagePullPolicy: Never")
    return EXIT_OK
