#!/usr/bin/env bash
# Run the whole test suite (what .ci/run calls). Sets the machine up first if needed.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/lcsb ] || bash scripts/setup.sh
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
