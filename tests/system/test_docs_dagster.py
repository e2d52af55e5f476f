"""The docs' `dg launch` examples (blocks marked `<!-- docs-test: e2e -->`) run as written, from
the project root, with the Dagster home, the confidential store, the public directory and the
ledger in a temporary directory; `dg dev` itself is run by test_e2e_dagster.py. A command an
earlier block runs word for word is run once (README.md's one month opens docs/dagster.md's
block too): each `dg launch` costs two Dagster processes, a run and its step."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from docs_pages import PAGES, Block, blocks
from helpers import ROOT

from dprelease.ledger import Ledger
from pipelines.demo_data import generate_case_control, generate_visits

pytestmark = pytest.mark.e2e
E2E_BLOCKS = [b for page in PAGES for b in blocks(page) if b.marker == "e2e"]


def script_of(block: Block) -> str:
    """The block's lines to run: not `dg dev`, nor a command (an unindented `dg launch` line) an
    earlier block already runs."""
    earlier = {
        " ".join(line.split())
        for other in E2E_BLOCKS[: E2E_BLOCKS.index(block)]
        for line in other.text.splitlines()
        if line.startswith(".venv/bin/dg launch")
    }
    return "\n".join(
        line
        for line in block.text.splitlines()
        if not re.search(r"\bdg dev\b", line) and " ".join(line.split()) not in earlier
    )


def launched(script: str) -> list[str]:
    """The months the script launches: each `--partition`, a loop's words for `"$month"`."""
    months = re.findall(r"--partition (\d{4}-\d{2})", script)
    for loop in re.findall(r"^for month in ([\d\- ]+); do", script, flags=re.MULTILINE):
        months += loop.split()
    return months


@pytest.mark.parametrize("block", E2E_BLOCKS, ids=lambda b: b.where)
def test_the_dg_launch_examples_run(block: Block, tmp_path: Path) -> None:
    script = script_of(block)
    assert "dg launch" in script, block.where
    home = tmp_path / "dagster"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    confidential = tmp_path / "confidential"
    confidential.mkdir()
    generate_visits(n_patients=2_000).write_parquet(confidential / "visits.parquet")
    generate_case_control().write_parquet(confidential / "case_control.parquet")
    environment = {
        **{k: v for k, v in os.environ.items() if not k.startswith("DPRELEASE_")},
        "DAGSTER_HOME": str(home),
        "DPRELEASE_CONFIDENTIAL_DIR": str(confidential),
        "DPRELEASE_PUBLIC_DIR": str(tmp_path / "public"),
        "DPRELEASE_LEDGER_URL": str(tmp_path / "ledger.sqlite"),
    }
    run = subprocess.run(
        ["bash", "-eu", "-c", script],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, f"{block.where}\n{run.stdout[-2000:]}\n{run.stderr[-2000:]}"
    months = launched(script)
    assert months, block.where
    for month in months:
        files = tmp_path / "public" / "visits_by_clinic" / month
        assert {p.name for p in files.iterdir()} == {
            "release.parquet",
            "release.csv",
            "manifest.json",
        }
    with Ledger(str(tmp_path / "ledger.sqlite"), mode="read") as ledger:
        (scope,) = ledger.status("hospital_patients")
        assert scope.releases == len(set(months))  # each month charged once
