#!/usr/bin/env bash
# Re-resolve the locked Python dependencies from pyproject.toml, with hashes:
#   bash requirements/update.sh
# - build.lock:   pip and maturin (the image's builder stage, tests/setup_env.sh);
# - runtime.lock: what the image installs beside ksched's wheel (tests/test_wheel.sh too);
# - dev.lock:     runtime.lock and build.lock's pins plus the dev extra (tests/setup_env.sh).
# Each lock pins every package, transitive ones included, with the sha256 of every file the
# index serves for that version; `pip install --require-hashes -r` refuses anything else.
# The locks are resolved for CPython 3.11 on Linux (the image's and CI's Python): run this
# with a python3.11. Upgrading one package: add `--upgrade-package NAME` to COMPILE below,
# or edit pyproject.toml's lower bound and run this again. Commit the three locks together.
set -euo pipefail
cd "$(dirname "$0")"
tools="$(mktemp -d)"
trap 'rm -rf "$tools"' EXIT
python3 -m venv "$tools"
"$tools/bin/pip" install -q "pip-tools>=7.4,<8"
COMPILE=("$tools/bin/pip-compile" -q --generate-hashes --allow-unsafe --strip-extras
  --no-emit-find-links --no-emit-index-url --no-emit-trusted-host --no-header --annotation-style line)
"${COMPILE[@]}" -o build.lock build.in
"${COMPILE[@]}" -o runtime.lock ../pyproject.toml
"${COMPILE[@]}" --extra dev -o dev.lock ../pyproject.toml dev.in
echo "requirements/{build,runtime,dev}.lock updated; run bash tests/run.sh before committing them"
