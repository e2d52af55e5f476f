#!/usr/bin/env bash
# Every benchmark docs/performance.md (and docs/quantiles.md, docs/zcdp.md) quotes, in one go
# (about 75 minutes on 2 cores, 2 GB of parquet in $BENCH_DATA). Needs `bash bench/setup.sh` (OpenDP) and `bash bench/setup_tumult.sh` (Tumult
# Analytics) once; each script prints its markdown table with the machine and load average.
set -euo pipefail
cd "$(dirname "$0")/.."
data="${BENCH_DATA:-/tmp/bench_data}"
mkdir -p "$data"
py=.venv/bin/python
step() { echo "=== $1 $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"; }
step startup;  $py bench/bench_startup.py --rounds 15
step noise;    $py bench/bench_noise.py --repeats 5 --opendp-max 1000000
step engine;   $py bench/bench_engine.py --sizes 10000000 --repeats 3 --data "$data" \
                 --variants floor floor_sorted floor_first engine dprelease opendp
step profile;  $py bench/bench_engine.py --sizes 10000000 --repeats 3 --data "$data" \
                 --variants floor_sorted engine engine_whole summary
step quantile_release; $py bench/bench_quantile_release.py --rows 10000000 --data "$data"
step weights;  $py bench/bench_weights.py
step zcdp;     $py bench/bench_zcdp.py
step moe;      $py bench/bench_moe.py
step spark;    $py bench/bench_spark.py --rows 10000000 --repeats 3
step engine_1e8; $py bench/bench_engine.py --sizes 100000000 --repeats 3 --data "$data" \
                 --variants floor_sorted floor_first engine dprelease
step quantiles; $py bench/bench_quantiles.py
step margins;  $py bench/bench_consistency.py
step done
