"""Throughput of dprelease's exact samplers against same-process floors and OpenDP, in one run.

Floors: numpy's float Laplace (`Generator.laplace`) and normal (`Generator.normal`), in the same
process, taking turns with dprelease's samplers. They are insecure (floating point, a PRNG) and
set how fast a vectorized sampler can go here; the ratios say what exactness and the OS CSPRNG
cost. dprelease's discrete Gaussian is run with σ = the Laplace scale.

Peer: OpenDP's exact samplers, also fed by the OS CSPRNG, measured through `make_laplace` and
`make_gaussian` over an integer vector, the way a user would call them (the timing includes
turning the result into a Python list, which is part of that API). OpenDP is installed only in
the benchmark env, and timed in a child process of that env's Python (dprelease runs in .venv):

    bash bench/setup.sh
    .venv/bin/python bench/bench_noise.py                        # 10^7 draws, ~30 minutes
    .venv/bin/python bench/bench_noise.py --opendp-max 1000000   # OpenDP on 10^6: ~6 minutes

Every rate is the median of --repeats runs (range in brackets); a ratio is the median of the
ratios of runs made one after the other. Prints a markdown table and writes it to
bench/results/noise.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "noise.md"
BENCH_PYTHON = ROOT / ".venv-bench" / "bin" / "python"


def timed(draw: Callable[[], object], size: int) -> float:
    """Draws per second of one call."""
    start = time.perf_counter()
    draw()
    return size / (time.perf_counter() - start)


def local_rates(scale: float, size: int, repeats: int) -> dict[str, list[float]]:
    """Rates (draws/s) of dprelease's samplers and numpy's floors, the four taking turns."""
    import numpy as np

    from dprelease.mechanism.noise import default_noise_source, discrete_gaussian, discrete_laplace

    source = default_noise_source()
    rng = np.random.default_rng()
    variants: dict[str, Callable[[], object]] = {
        "laplace": lambda: discrete_laplace(scale, size, source),
        "np_laplace": lambda: rng.laplace(0.0, scale, size),
        "gaussian": lambda: discrete_gaussian(scale**2, size, source),
        "np_normal": lambda: rng.normal(0.0, scale, size),
    }
    discrete_laplace(scale, 1000, source)  # warm-up: imports, first allocations
    discrete_gaussian(scale**2, 1000, source)
    rates: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):
        for name, draw in variants.items():
            rates[name].append(timed(draw, size))
    return rates


def opendp_per_second(kind: str, scale: float, size: int) -> float:
    """One run of OpenDP's exact integer Laplace or Gaussian over `size` zeros, in draws/s."""
    import opendp.prelude as dp

    dp.enable_features("contrib")
    space = dp.vector_domain(dp.atom_domain(T=int)), dp.l1_distance(T=int)
    if kind == "gaussian":
        space = dp.vector_domain(dp.atom_domain(T=int)), dp.l2_distance(T=int)
        measurement = dp.m.make_gaussian(*space, scale=float(scale))
    else:
        measurement = dp.m.make_laplace(*space, scale=float(scale))
    data = [0] * size
    start = time.perf_counter()
    released = measurement(data)
    elapsed = time.perf_counter() - start
    assert len(released) == size
    return size / elapsed


def opendp_in_bench_env(python: Path, kind: str, scale: float, size: int) -> tuple[float, str]:
    """OpenDP's rate and version, from a child process of the benchmark env."""
    child = [str(python), __file__, "--opendp-child", kind, str(scale), str(size)]
    rate, opendp_version = subprocess.run(
        child, check=True, capture_output=True, text=True
    ).stdout.split()
    return float(rate), opendp_version


def rate_cell(rates: list[float]) -> str:
    """Median and range, in M draws/s."""
    return (
        f"{statistics.median(rates) / 1e6:.1f} [{min(rates) / 1e6:.1f}–{max(rates) / 1e6:.1f}] M/s"
    )


def ratio_cell(ours: list[float], floor: list[float]) -> str:
    """Median and range of the per-run ratios ours/floor."""
    ratios = [a / b for a, b in zip(ours, floor, strict=True)]
    return f"{statistics.median(ratios):.2f} [{min(ratios):.2f}–{max(ratios):.2f}]"


def main() -> int:
    if sys.argv[1:2] == ["--opendp-child"]:  # in .venv-bench: no dprelease import
        from importlib.metadata import version

        kind, scale, size = sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
        print(opendp_per_second(kind, scale, size), version("opendp"))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10**7])
    parser.add_argument("--scales", type=float, nargs="+", default=[1.0, 30.0, 3000.0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--opendp-max",
        type=int,
        default=None,
        help="time OpenDP on at most this many draws (its rate is flat in the size)",
    )
    parser.add_argument("--no-opendp", action="store_true", help="skip the OpenDP columns")
    parser.add_argument("--bench-python", type=Path, default=BENCH_PYTHON)
    args = parser.parse_args()
    rows = []
    opendp_version = "not run"
    loads = [os.getloadavg()[0]]
    for size in args.sizes:
        for scale in args.scales:
            rates = local_rates(scale, size, args.repeats)
            peer = ["", "", "", ""]
            if not args.no_opendp:
                opendp_size = min(size, args.opendp_max or size)
                note = "" if opendp_size == size else f" (on {opendp_size:.0e})"
                for i, kind in enumerate(("laplace", "gaussian")):
                    theirs, opendp_version = opendp_in_bench_env(
                        args.bench_python, kind, scale, opendp_size
                    )
                    ours = statistics.median(rates[kind])
                    peer[2 * i : 2 * i + 2] = [
                        f"{theirs / 1e6:.3f} M/s{note}",
                        f"{ours / theirs:.0f}×",
                    ]
            loads.append(os.getloadavg()[0])
            rows.append(
                f"| {size:.0e} | {scale:g} | {rate_cell(rates['laplace'])} | "
                f"{rate_cell(rates['np_laplace'])} | "
                f"{ratio_cell(rates['laplace'], rates['np_laplace'])} | {peer[0]} | {peer[1]} | "
                f"{rate_cell(rates['gaussian'])} | {rate_cell(rates['np_normal'])} | "
                f"{ratio_cell(rates['gaussian'], rates['np_normal'])} | {peer[2]} | {peer[3]} |"
            )
            print(rows[-1], file=sys.stderr, flush=True)
    header = [
        "# Exact discrete Laplace and Gaussian throughput",
        "",
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, OpenDP {opendp_version}; {args.repeats} runs "
        f"per cell, taking turns; load average {min(loads):.1f}–{max(loads):.1f}. dprelease "
        "and OpenDP read the OS CSPRNG; numpy's floors are float samplers on a PRNG. "
        "Gaussian rows use σ = the scale b.",
        "",
        "| draws | scale b | dprelease Laplace | numpy laplace | ratio | OpenDP Laplace | "
        "speed-up | dprelease Gaussian | numpy normal | ratio | OpenDP Gaussian | speed-up |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    table = "\n".join(header + rows) + "\n"
    print(table)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
