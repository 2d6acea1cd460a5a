"""ksched's container image, built from the checkout by ``ksched image build``.

With Docker where ``docker info`` answers; otherwise with buildah on Debian base
images that mmdebstrap makes from the Debian archive and that are cached
(bases.py). tools.py finds (or installs) the builders and runs them, layers.py
reads an image's layers and says which dominate its size, build.py stages the
build context, builds ``deploy/Dockerfile`` and starts the image once.
"""
