#!/usr/bin/env bash
# Install the dashboard's dependencies into ./.venv and start it on the embedded data.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/_venv.sh requirements.txt
# streamlit run app.py, importing what the first page needs while the browser loads it
exec .venv/bin/python -m pages.common.server --server.port "${PORT:-8501}" "$@"
