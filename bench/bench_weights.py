"""What survey weights cost: the same release weighted and unweighted, on the same data.

One synthetic parquet file (seeded numpy; test data, not noise): persons with 1–4 rows, 50
regions × 10 age bands, an income and a survey weight. Two variants of one spec (count, sum and
mean of income by region × age band, at most 4 rows per person, ε = 1), each released end to
end with `dp.release` (the production noise source):

* plain: unweighted — the floor;
* weighted: `survey_weight: {column: weight, upper: 2000}` on the release, so the count is Σ w,
  the sum Σ w·x and the mean their ratio (one product per row more, and one more column read).

Every measurement is a fresh child process timing the release alone (imports excluded); the
variants alternate, and the ratio weighted/plain is taken round by round, so a drift of the
machine's speed affects both sides of each ratio alike. Prints the median and range of each
variant and of the ratio, and the load average.

    .venv/bin/python bench/bench_weights.py                       # 2·10^6 rows, 5 rounds
    .venv/bin/python bench/bench_weights.py --rows 200000 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

VARIANTS = ("plain", "weighted")
REGIONS = [f"r{i:02d}" for i in range(50)]
AGE_BANDS = [f"a{i}" for i in range(10)]


def generate(rows: int, path: Path, seed: int = 20261201) -> None:
    import numpy as np
    import polars as pl

    rng = np.random.default_rng(seed)
    person = np.repeat(np.arange(rows), rng.integers(1, 5, rows))[:rows]
    pl.DataFrame(
        {
            "person_id": person,
            "region": rng.choice(REGIONS, rows),
            "age_band": rng.choice(AGE_BANDS, rows),
            "income": rng.lognormal(10, 1, rows),
            "weight": rng.gamma(2.0, 300.0, rows),
        }
    ).write_parquet(path)


def spec(weighted: bool) -> dict:
    income = {"column": "income", "lower": 0, "upper": 200_000}
    release = {
        "name": "bench_weights",
        "source": "bench",
        "privacy_unit": "person_id",
        "max_rows_per_unit": 4,
        "group_by": [
            {"column": "region", "domain": {"values": REGIONS}},
            {"column": "age_band", "domain": {"values": AGE_BANDS}},
        ],
        "statistics": [
            {"name": "n", "kind": "count"},
            {"name": "income", "kind": "sum", **income},
            {"name": "mean_income", "kind": "mean", **income},
        ],
    }
    if weighted:
        release["survey_weight"] = {"column": "weight", "upper": 2000}
    return release


def child(variant: str, path: str) -> None:
    """Release once and print the seconds the release took."""
    import dprelease as dp

    release_spec = dp.ReleaseSpec.model_validate(spec(variant == "weighted"))
    start = time.perf_counter()
    dp.release(path, release_spec, epsilon=1.0)
    print(json.dumps({"seconds": time.perf_counter() - start}))


def run(variant: str, path: Path) -> float:
    out = subprocess.run(
        [sys.executable, __file__, "--child", variant, str(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(json.loads(out.stdout.splitlines()[-1])["seconds"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.parquet"
        generate(args.rows, path)
        run("plain", path)  # warm-up: file cache, first imports
        seconds: dict[str, list[float]] = {v: [] for v in VARIANTS}
        for round_ in range(args.rounds):
            order = VARIANTS if round_ % 2 == 0 else VARIANTS[::-1]
            for variant in order:
                seconds[variant].append(run(variant, path))
    ratios = [w / p for w, p in zip(seconds["weighted"], seconds["plain"], strict=True)]
    print(f"{args.rows:,} rows, {args.rounds} rounds; load average {os.getloadavg()}")
    for name, values in [*seconds.items(), ("weighted / plain", ratios)]:
        print(
            f"{name:>17}: median {statistics.median(values):.3f}, "
            f"range {min(values):.3f}–{max(values):.3f}"
        )


if __name__ == "__main__":
    main()
