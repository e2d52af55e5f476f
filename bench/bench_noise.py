"""Throughput of dprelease's exact discrete Laplace sampler against OpenDP's, in one run.

Both are exact discrete Laplace samplers fed by the OS CSPRNG. OpenDP is measured through
`make_laplace` over an integer vector, the way a user would call it (its timing includes
turning the result into a Python list, which is part of that API). OpenDP is installed only in
the benchmark env, and timed in a child process of that env's Python (dprelease runs in .venv):

    bash bench/setup.sh
    .venv/bin/python bench/bench_noise.py            # full run, ~15 minutes
    .venv/bin/python bench/bench_noise.py --opendp-max 2000000   # ~5 minutes

Prints a markdown table and writes it to bench/results/noise.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "noise.md"
BENCH_PYTHON = ROOT / ".venv-bench" / "bin" / "python"


def ours_per_second(scale: float, size: int, repeats: int) -> float:
    """Best of `repeats` runs, in draws per second, with the production (os.urandom) source."""
    from dprelease.mechanism.noise import default_noise_source, discrete_laplace

    source = default_noise_source()
    discrete_laplace(scale, 1000, source)  # warm-up: imports, first allocations
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        discrete_laplace(scale, size, source)
        best = min(best, time.perf_counter() - start)
    return size / best


def opendp_per_second(scale: float, size: int) -> float:
    """One run of OpenDP's exact integer Laplace over `size` zeros, in draws per second."""
    import opendp.prelude as dp

    dp.enable_features("contrib")
    space = dp.vector_domain(dp.atom_domain(T=int)), dp.l1_distance(T=int)
    measurement = dp.m.make_laplace(*space, scale=float(scale))
    data = [0] * size
    start = time.perf_counter()
    released = measurement(data)
    elapsed = time.perf_counter() - start
    assert len(released) == size
    return size / elapsed


def opendp_in_bench_env(python: Path, scale: float, size: int) -> tuple[float, str]:
    """OpenDP's rate and version, from a child process of the benchmark env."""
    child = [str(python), __file__, "--opendp-child", str(scale), str(size)]
    rate, opendp_version = subprocess.run(
        child, check=True, capture_output=True, text=True
    ).stdout.split()
    return float(rate), opendp_version


def main() -> int:
    if sys.argv[1:2] == ["--opendp-child"]:  # in .venv-bench: no dprelease import
        from importlib.metadata import version

        print(opendp_per_second(float(sys.argv[2]), int(sys.argv[3])), version("opendp"))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10**6, 10**7])
    parser.add_argument("--scales", type=float, nargs="+", default=[1.0, 30.0, 3000.0])
    parser.add_argument(
        "--opendp-max",
        type=int,
        default=None,
        help="time OpenDP on at most this many draws (its rate is flat in the size)",
    )
    parser.add_argument("--bench-python", type=Path, default=BENCH_PYTHON)
    args = parser.parse_args()
    rows = []
    opendp_version = "?"
    for size in args.sizes:
        for scale in args.scales:
            ours = ours_per_second(scale, size, repeats=3 if size <= 10**6 else 2)
            opendp_size = min(size, args.opendp_max or size)
            theirs, opendp_version = opendp_in_bench_env(args.bench_python, scale, opendp_size)
            note = "" if opendp_size == size else f" (timed on {opendp_size:.0e})"
            rows.append(
                f"| {size:.0e} | {scale:g} | {ours / 1e6:.2f} M/s | "
                f"{theirs / 1e6:.3f} M/s{note} | {ours / theirs:.0f}× |"
            )
            print(rows[-1], file=sys.stderr, flush=True)
    load = os.getloadavg()
    header = [
        "# Exact discrete Laplace throughput",
        "",
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, OpenDP {opendp_version}; "
        f"load average at the end {load[0]:.1f}. Both read the OS CSPRNG.",
        "",
        "| draws | scale b | dprelease | OpenDP make_laplace | speed-up |",
        "| ---: | ---: | ---: | ---: | ---: |",
    ]
    table = "\n".join(header + rows) + "\n"
    print(table)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
