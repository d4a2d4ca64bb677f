#!/usr/bin/env bash
# Run the whole test suite (what .ci/run calls). Sets the machine up first if needed.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/lcsb ] || bash scripts/setup.sh
# the dashboard's browser tests (tests/ui) drive Debian's Chromium through its driver (needs root once)
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
fi
exec .venv/bin/python -m pytest -q -p no:cacheprovider --durations=15 "$@"
