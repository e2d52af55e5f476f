#!/usr/bin/env python3
"""One entry point for the two README commands; needs nothing but Python 3.11+.

    python3 dev.py demo         # set up .venv if needed, then run the whole demo pipeline
    python3 dev.py test         # set up .venv if needed, then ruff, mypy and the fast tier
    python3 dev.py test --all   # ... and every tier: Spark, the real `dg dev` and browser, races
    python3 dev.py test tests/unit/test_spec.py   # just these tests (after ruff and mypy)

`demo` installs only what the demo needs (the library and its Dagster code location); `test`
installs the rest (the dev tools, the Spark extra and Dagster's PostgreSQL storage). The
virtualenv is (re)installed whenever pyproject.toml changes, so a fresh clone just works. Extra
arguments go to pytest.
Both commands also give the checkout its one persistent Dagster home, `.dprelease/dagster`, named
in `.env` (which `dg dev`, `dg launch` and the demo read), so nobody sets DAGSTER_HOME by hand.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
STAMP = VENV / ".pyproject.sha256"
#: What each command installs (extras of the project).
DEMO_EXTRAS = ("dagster",)
TEST_EXTRAS = ("consortium", "dagster", "dev", "spark", "postgres", "publication")
#: The fast tier leaves these markers out (see tests/conftest.py).
FAST_TIER = "not e2e and not spark and not races"
#: The slow tiers as two pytest processes side by side: Spark (one JVM, whose jobs leave the
#: cores idle between stages) with the races (short since their processes are forked from one
#: server), beside `dg dev`, the browser and the Dagster processes. xdist would start a JVM per
#: worker, and two JVMs on two cores made the Spark tier slower than running it alone (a CI run:
#: 838 s for the slow tiers, 689 s of it Spark's test time); with the races beside `dg dev`, that
#: process was the critical path (551 s against Spark's 356 s).
SLOW_TIERS = ("spark or races", "e2e and not spark and not races")
DAGSTER_HOME = ROOT / ".dprelease" / "dagster"
#: Runs and materializations stay on this machine: no usage statistics are sent.
DAGSTER_YAML = "telemetry:\n  enabled: false\n"


def _ensure_venv(extras: tuple[str, ...]) -> None:
    """.venv with the project and `extras` installed for the current pyproject.toml (the stamp
    records the file's digest and every extra installed since)."""
    if sys.version_info < (3, 11):  # noqa: UP036  (dev.py runs on whatever python3 is)
        sys.exit(f"dprelease needs Python 3.11+, this is {sys.version.split()[0]}")
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    stamped = STAMP.read_text().split() if STAMP.exists() else []
    installed = set(stamped[1:]) if stamped[:1] == [digest] else set()
    if set(extras) <= installed:
        return
    if not (BIN / "python").exists():
        print(f"creating {VENV} ...", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    wanted = sorted(installed | set(extras))
    print(f"installing dprelease with {', '.join(wanted)} into .venv ...", flush=True)
    start = time.monotonic()
    pip = [str(BIN / "python"), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "-U", "pip"], check=True)
    subprocess.run([*pip, "-e", f"{ROOT}[{','.join(wanted)}]"], check=True)
    STAMP.write_text(" ".join([digest, *wanted]))
    print(f"dev.py: installed in {time.monotonic() - start:.0f} s", flush=True)


def ensure_dagster_home() -> None:
    """Create the home and name it in `.env` (kept if `.env` already names one); Dagster needs
    an absolute path, so the line is written per checkout and `.env` is not committed."""
    DAGSTER_HOME.mkdir(parents=True, exist_ok=True)
    config = DAGSTER_HOME / "dagster.yaml"
    if not config.exists():
        config.write_text(DAGSTER_YAML)
    env = ROOT / ".env"
    lines = env.read_text().splitlines() if env.exists() else []
    if not any(line.startswith("DAGSTER_HOME=") for line in lines):
        env.write_text("\n".join([*lines, f"DAGSTER_HOME={DAGSTER_HOME}"]) + "\n")


def _run(*argv: str) -> int:
    environment = {**os.environ, "DAGSTER_HOME": os.environ.get("DAGSTER_HOME", str(DAGSTER_HOME))}
    return subprocess.run([str(BIN / argv[0]), *argv[1:]], cwd=ROOT, env=environment).returncode


def _step(name: str, *argv: str) -> int:
    """`_run`, then one line saying how long the step took, so a CI log shows where time goes."""
    start = time.monotonic()
    rc = _run(*argv)
    outcome = "passed" if rc == 0 else f"failed (exit {rc})"
    print(f"dev.py: {name} {outcome} in {time.monotonic() - start:.0f} s", flush=True)
    return rc


def _every_tier(pytest_args: list[str]) -> int:
    """The fast tier on every core, then the slow tiers side by side, with mypy beside them;
    the output of the Spark and races process is printed after the other's, so the log reads
    in one piece."""
    fast = ("python", "-m", "pytest", "-m", FAST_TIER, "-n", "auto", *pytest_args)
    rc = _step("fast tier", *fast)
    if rc:
        return rc
    start = time.monotonic()
    mypy = subprocess.Popen([str(BIN / "mypy")], cwd=ROOT)
    spark_tier, other_tiers = SLOW_TIERS
    environment = {**os.environ, "DAGSTER_HOME": os.environ.get("DAGSTER_HOME", str(DAGSTER_HOME))}
    with tempfile.TemporaryFile("w+") as spark_log:
        spark = subprocess.Popen(
            [str(BIN / "python"), "-m", "pytest", "-m", spark_tier, *pytest_args],
            cwd=ROOT, env=environment, stdout=spark_log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        rc = _step("slow tier (e2e)", "python", "-m", "pytest", "-m", other_tiers,
                   *pytest_args)  # fmt: skip
        spark_rc = spark.wait()
        spark_log.seek(0)
        print(spark_log.read(), flush=True)
    outcome = "passed" if spark_rc == 0 else f"failed (exit {spark_rc})"
    print(f"dev.py: slow tiers (spark, races) {outcome}, done {time.monotonic() - start:.0f} s "
          "after they started", flush=True)  # fmt: skip
    typed = mypy.wait()
    outcome = "passed" if typed == 0 else f"failed (exit {typed})"
    print(f"dev.py: mypy {outcome}, done {time.monotonic() - start:.0f} s after it started")
    return rc or spark_rc or typed


def main() -> int:
    command = sys.argv[1] if len(sys.argv) > 1 else "help"
    extra = sys.argv[2:]
    if command == "demo":
        _ensure_venv(DEMO_EXTRAS)
        ensure_dagster_home()
        return _run("python", "-m", "pipelines.demo", *extra)
    if command == "test":
        _ensure_venv(TEST_EXTRAS)
        ensure_dagster_home()
        every_tier = "--all" in extra
        pytest_args = [arg for arg in extra if arg != "--all"]
        # tests named by path (tests/unit/test_x.py::test_y) run just as asked, in one process
        chosen = any(
            not arg.startswith("-") and (ROOT / arg.split("::")[0]).exists() for arg in pytest_args
        )
        rc = _step("ruff", "ruff", "check", ".")
        if every_tier and not chosen:
            # every tier: mypy (minutes from a clean clone's empty cache) type-checks while the
            # slow tiers run, which mostly wait on servers, JVMs and processes
            return rc or _every_tier(pytest_args)
        rc = rc or _step("mypy", "mypy")
        if chosen:
            return rc or _run("python", "-m", "pytest", *pytest_args)
        # the fast tier spreads over every core (its tests share no state); the slow tiers start
        # servers, browsers and 16-process races of their own, so they run two at a time
        fast = ("python", "-m", "pytest", "-m", FAST_TIER, "-n", "auto", *pytest_args)
        rc = rc or _step("fast tier", *fast)
        if rc == 0:
            print(
                "fast tier passed; every tier (Spark, dg dev and a browser, ledger races): "
                "python3 dev.py test --all"
            )
        return rc
    print(__doc__)
    return 0 if command in {"help", "-h", "--help"} else 2


if __name__ == "__main__":
    sys.exit(main())
