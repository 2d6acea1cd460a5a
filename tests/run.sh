#!/usr/bin/env bash
# The whole test suite: build, lints, cargo test, the control-plane build and pytest
# (unit, property and integration tests on a local real control plane).
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/setup_env.sh
if [ "${CI:-}" = "true" ]; then
  export KSCHED_REQUIRE_CLUSTER=1
fi
echo "== rust: fmt, clippy, test"
cargo fmt --check
cargo clippy --all-targets -- -D warnings
cargo test --quiet
echo "== python: ruff, mypy, stubtest"
ruff check python tests
ruff format --check python tests
mypy --strict python/ksched
python -m mypy.stubtest ksched._core
lint-imports   # layering and "only loop.client/loop.leader import the Kubernetes client" (.importlinter)
echo "== image build steps: the Dockerfile's wheel, installed alone; hadolint"
bash tests/test_wheel.sh
echo "== control plane binaries (built from Go modules when missing)"
python -m ksched.cluster.build
echo "== pytest"
python -m pytest tests
