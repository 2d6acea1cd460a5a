# Sourced by tests/run.sh and bench/demo.sh: a virtual environment in .venv
# with ksched built from this checkout (maturin, release profile) and the dev tools.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
# shellcheck disable=SC1091
. .venv/bin/activate
python -m pip install -q --upgrade pip
python -m pip install -q -e '.[dev]'
