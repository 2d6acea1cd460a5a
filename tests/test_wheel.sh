#!/usr/bin/env bash
# The Dockerfile's build steps, without Docker: build the abi3 wheel with
# maturin exactly as the builder stage does, install it and the locked dependencies
# (requirements/runtime.lock, hash-checked) into a fresh virtual environment (the
# runtime stage), and run the entrypoint's
# command. Also lints the Dockerfile with hadolint.
set -euo pipefail
cd "$(dirname "$0")/.."
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
maturin build --release --out "$work/wheels" -q 2>&1 | tail -2
python3 -m venv "$work/runtime"
"$work/runtime/bin/pip" install -q --require-hashes -r requirements/runtime.lock
"$work/runtime/bin/pip" install -q --no-deps "$work"/wheels/*.whl
"$work/runtime/bin/pip" check
"$work/runtime/bin/ksched" run --help | head -1
"$work/runtime/bin/python" -c "import ksched._core, ksched.loop.run; print('wheel ok:', ksched.__version__)"
# The example configurations ship inside the package: bench --quality's default is found there.
"$work/runtime/bin/python" -c "from ksched.bench.quality.run import EXAMPLE_CONFIG as p; from ksched.config import load_config; load_config(p); assert 'site-packages' in p.parts, p; print('examples ok:', p.name)"
hadolint --failure-threshold warning deploy/Dockerfile
echo "Dockerfile lint ok"
