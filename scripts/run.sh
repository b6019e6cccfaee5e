#!/usr/bin/env bash
# Install the dashboard's dependencies into ./.venv and start it on the embedded data.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/_venv.sh requirements.txt
exec .venv/bin/streamlit run app.py --server.port "${PORT:-8501}" "$@"
