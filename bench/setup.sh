#!/usr/bin/env bash
# Create .venv-bench (gitignored) with dprelease plus the benchmark-only deps (OpenDP), so the
# comparison never makes OpenDP a project dependency. Usage: bash bench/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv-bench
.venv-bench/bin/python -m pip install --disable-pip-version-check -q -r bench/requirements.txt
.venv-bench/bin/python -m pip install --disable-pip-version-check -q --no-deps -e .
echo "ready: .venv-bench/bin/python bench/bench_noise.py; .venv/bin/python bench/bench_engine.py"
