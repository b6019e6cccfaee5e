#!/usr/bin/env bash
# Install what the tests need (Debian's chromium for the browser tests, the Python test
# dependencies into ./.venv) and run the whole suite in two worker processes. Extra arguments
# go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v chromium >/dev/null 2>&1; then
  sudo_cmd=$( [ "$(id -u)" = 0 ] || echo sudo )
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq chromium >/dev/null
fi
. scripts/_venv.sh requirements-dev.txt
# SERVEWISE_TEST_WORKERS=0 runs the suite in this process (pytest-xdist's -n 0).
exec .venv/bin/python -m pytest -n "${SERVEWISE_TEST_WORKERS:-2}" "$@"
