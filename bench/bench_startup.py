"""Start-up time: what every CLI call, Dagster run worker and notebook pays before any work.

Fresh processes, interleaved round by round so a change in machine load hits every command alike:

  floor        `python -c pass`: the interpreter with its site packages (nothing to win below it)
  polars       `python -c "import polars"`: what a plain polars script pays
  import       `python -c "import dprelease"` (goal ≤ 0.3 s on a quiet machine)
  help         `dprelease --help` (goal ≤ 0.5 s)
  release API  `python -c "import dprelease as dp; dp.release"`: the first name a user touches

Prints a markdown table of wall-clock medians and ranges, each command's time above the floor,
and which heavy modules (scipy, SQLAlchemy, matplotlib, pyspark, dagster, pandas, pyarrow,
polars, numpy) each one loads; `tests/unit/test_imports.py` keeps scipy, SQLAlchemy, matplotlib
and Spark out of import and help.

    .venv/bin/python bench/bench_startup.py            # 9 rounds
    .venv/bin/python bench/bench_startup.py --rounds 21
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HEAVY = (
    "scipy", "sqlalchemy", "matplotlib", "pyspark", "dagster",
    "pandas", "pyarrow", "polars", "numpy",
)  # fmt: skip
BIN = Path(sys.executable).parent

#: name → (argv, goal in seconds or None)
COMMANDS: dict[str, tuple[list[str], float | None]] = {
    "floor": ([sys.executable, "-c", "pass"], None),
    "polars": ([sys.executable, "-c", "import polars"], None),
    "import": ([sys.executable, "-c", "import dprelease"], 0.3),
    "help": ([str(BIN / "dprelease"), "--help"], 0.5),
    "release API": ([sys.executable, "-c", "import dprelease as dp; dp.release"], None),
}

_REPORT_HEAVY = (
    "import sys, runpy; sys.argv = {argv!r}; "
    "exec({code!r}) if {code!r} else runpy.run_path({path!r}, run_name='__main__')"
)


def wall(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def heavy_modules(argv: list[str]) -> list[str]:
    """The heavy top-level packages a command has loaded when it exits."""
    if argv[0] == sys.executable:
        code, path, args = argv[2], "", ["-c"]
    else:
        code, path, args = "", argv[0], argv
    probe = (
        f"import atexit, sys\n"
        f"atexit.register(lambda: sys.__stderr__.write('LOADED ' + ' '.join(sorted("
        f"{{m.split('.')[0] for m in sys.modules}} & {set(HEAVY)!r})) + '\\n'))\n"
        + _REPORT_HEAVY.format(argv=args, code=code, path=path)
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=False
    )
    for line in done.stderr.splitlines():
        if line.startswith("LOADED"):
            return line.split()[1:]
    return ["?"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    for argv, _ in COMMANDS.values():  # warm the file cache and bytecode once
        wall(argv)
    load_before = os.getloadavg()[0]
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(args.rounds):
        for name, (argv, _) in COMMANDS.items():
            times[name].append(wall(argv))
    load_after = os.getloadavg()[0]
    floor = statistics.median(times["floor"])
    print(
        f"Start-up, {args.rounds} interleaved rounds of fresh processes; {os.cpu_count()} CPUs, "
        f"{platform.machine()}, Python {platform.python_version()}; load average "
        f"{load_before:.1f} → {load_after:.1f}\n"
    )
    print("| command | median s | range s | above the floor s | goal | heavy modules loaded |")
    print("|---|---:|---:|---:|---|---|")
    for name, (argv, goal) in COMMANDS.items():
        median = statistics.median(times[name])
        verdict = "" if goal is None else f"≤ {goal} s: {'met' if median <= goal else 'NOT met'}"
        loaded = ", ".join(heavy_modules(argv)) or "none"
        print(
            f"| {name} | {median:.3f} | {min(times[name]):.3f}–{max(times[name]):.3f} | "
            f"{median - floor:.3f} | {verdict} | {loaded} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
