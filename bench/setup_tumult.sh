#!/usr/bin/env bash
# Create .venv-tumult (gitignored) with Tumult Analytics on the same PySpark as .venv, for
# bench/bench_spark.py; Tumult never becomes a project dependency. Usage: bash bench/setup_tumult.sh
#
# Python 3.12: tmlt.analytics 0.21 pins pyspark<3.6 and pandas<2 on Python 3.11 (which clash with
# dprelease's pandas>=2.1 and Spark 4), and allows pyspark 4 only from Python 3.12 on.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${TUMULT_PYTHON:-}
if [ -z "$python" ]; then  # a pyenv shim can exist and still fail: try each until one runs
  for candidate in python3.12 "$(pyenv root 2>/dev/null)"/versions/3.12*/bin/python3.12; do
    if "$candidate" --version >/dev/null 2>&1; then python=$candidate; break; fi
  done
fi
[ -n "$python" ] || { echo "Tumult needs Python 3.12: set TUMULT_PYTHON" >&2; exit 1; }
spark=$(.venv/bin/python -c 'import pyspark; print(pyspark.__version__)')  # python3 dev.py test makes .venv
"$python" -m venv .venv-tumult
.venv-tumult/bin/python -m pip install --disable-pip-version-check -q \
    "tmlt.analytics==0.21.0" "pyspark[sql]==$spark"
echo "ready: .venv/bin/python bench/bench_spark.py --rows 1000000"
