# Shared by scripts/run.sh and scripts/test.sh: make ./.venv and install a requirements file.
# Usage: . scripts/_venv.sh REQUIREMENTS_FILE
set -euo pipefail
requirements="$1"
python_bin="${PYTHON:-python3}"
if ! "$python_bin" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "Servewise needs Python 3.11 or newer as '$python_bin' (set PYTHON=/path/to/python3.11)." >&2
  exit 1
fi
if [ ! -x .venv/bin/python ]; then
  if ! "$python_bin" -m venv .venv 2>/dev/null; then
    echo "python venv is missing: installing Debian's python3-venv" >&2
    ${SUDO:-$( [ "$(id -u)" = 0 ] || echo sudo )} apt-get install -y -qq python3-venv >/dev/null
    rm -rf .venv && "$python_bin" -m venv .venv
  fi
fi
stamp=".venv/.installed-$(sha256sum "$requirements" requirements.txt | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r "$requirements"
  touch "$stamp"
fi
# Byte-compile the project as pip does an installed package (stale files only: a fraction of a
# second): a fresh dashboard process then reads its modules instead of compiling them, which
# was ~0.15 s of CPU before its first page where the environment sets PYTHONDONTWRITEBYTECODE.
.venv/bin/python -m compileall -q -j 0 app.py pages planner benchmarks_runner >/dev/null
