#!/usr/bin/env python3
"""One entry point for the two README commands; needs nothing but Python 3.11+.

    python3 dev.py demo   # set up .venv if needed, then run the whole demo pipeline
    python3 dev.py test   # set up .venv if needed, then ruff + the whole test suite

The virtualenv is (re)installed whenever pyproject.toml changes, so a fresh clone just works.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
STAMP = VENV / ".pyproject.sha256"


def _ensure_venv() -> None:
    if sys.version_info < (3, 11):  # noqa: UP036  (dev.py runs on whatever python3 is)
        sys.exit(f"dprelease needs Python 3.11+, this is {sys.version.split()[0]}")
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if STAMP.exists() and STAMP.read_text() == digest:
        return
    if not (BIN / "python").exists():
        print(f"creating {VENV} ...", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    print("installing dprelease and its dev extras into .venv ...", flush=True)
    pip = [str(BIN / "python"), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "-U", "pip"], check=True)
    subprocess.run([*pip, "-e", f"{ROOT}[dev]"], check=True)
    STAMP.write_text(digest)


def _run(*argv: str) -> int:
    return subprocess.run([str(BIN / argv[0]), *argv[1:]], cwd=ROOT).returncode


def main() -> int:
    command = sys.argv[1] if len(sys.argv) > 1 else "help"
    extra = sys.argv[2:]
    if command == "demo":
        _ensure_venv()
        return _run("python", "-m", "pipelines.demo", *extra)
    if command == "test":
        _ensure_venv()
        rc = _run("ruff", "check", ".")
        return rc or _run("python", "-m", "pytest", *extra)
    print(__doc__)
    return 0 if command in {"help", "-h", "--help"} else 2


if __name__ == "__main__":
    sys.exit(main())
