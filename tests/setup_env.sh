# Sourced by tests/run.sh and bench/demo.sh: a virtual environment in .venv
# with ksched built from this checkout (maturin, release profile) and the dev tools,
# each at the version and hash requirements/dev.lock pins.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
# shellcheck disable=SC1091
. .venv/bin/activate
# Every dependency from the hash-checked locks (requirements/update.sh makes them), then
# ksched itself, built by the locked maturin, with nothing more resolved.
python -m pip install -q --require-hashes -r requirements/build.lock
python -m pip install -q --require-hashes -r requirements/dev.lock
python -m pip install -q --no-deps --no-build-isolation -e .
