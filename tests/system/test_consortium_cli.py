"""The consortium as its users run it: docs/consortium.md's walk-through, three sites, a key
holder and an aggregator, every command a separate `dprelease` process in its own directory;
and a site killed (SIGKILL) while it contributes."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import consortium_world  # noqa: F401  (skips without TenSEAL; fails in CI)
import polars as pl
import pytest
from helpers import ROOT

DOC = ROOT / "docs" / "consortium.md"
BIN = Path(sys.executable).parent


def walkthrough(upto: int | None = None) -> str:
    """The doc's shell blocks, in order (the first `upto` of them), as one script that stops at
    the first failure (each is marked for the docs tests as run here)."""
    blocks = re.findall(r"```sh\n(.*?)```", DOC.read_text(), re.S)
    return "set -euo pipefail\n" + "\n".join(blocks[:upto])


def run_walkthrough(directory: Path, upto: int | None = None) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(
        ["bash", "-c", walkthrough(upto)],
        cwd=directory,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_documented_walkthrough_runs_with_three_sites_as_processes(tmp_path: Path) -> None:
    done = run_walkthrough(tmp_path)
    assert done.returncode == 0, done.stderr
    assert "share of north (the stored share of an earlier run, resent)" in done.stdout
    assert "ρ = 1/10 charged to scope 'hospitals'" in done.stdout
    release = tmp_path / "release"
    table = pl.read_csv(release / "release.csv")
    assert {"admissions", "stay_days", "mean_stay"} <= set(table.columns)
    # margins: six cells, two region totals and the grand total, each the sum of its cells
    assert table["level"].to_list() == ["region,age_band"] * 6 + ["region"] * 2 + ["total"]
    cells, regions = table.head(6), table.slice(6, 2)
    for name in ("admissions", "stay_days"):
        by_region = [cells.filter(pl.col("region") == r)[name].sum() for r in ("north", "south")]
        assert regions[name].to_list() == pytest.approx(by_region)
        assert table[name][-1] == pytest.approx(cells[name].sum())
    facts = json.loads((tmp_path / "release.consortium.json").read_text())
    assert facts["contributed"] == ["east", "north", "south"] and facts["missing"] == []
    manifest = json.loads((release / "manifest.json").read_text())
    assert manifest["noise_source"]["private"] is True
    # every statistic's noise is the sum of the three sites' shares, as the header says, not
    # the one central discrete Gaussian draw of σ² = Δ2²/(2ρ) the central entry would state
    assert manifest["mechanism"].startswith("distributed discrete Gaussian")
    for entry in manifest["statistics"]:
        stated = entry["mechanism"]
        assert stated.startswith("distributed discrete Gaussian: the sum of 3 sites' exact "), entry
        assert "any 2 of the shares" in stated and "Δ2²/(2ρ)" not in stated
    assert [level["level"] for level in manifest["margins"]["levels"]] == [
        "region,age_band",
        "region",
        "total",
    ]
    assert [m.get("level") for m in facts["measurements"]][:3] == [None, "region", "total"]
    # what each party holds: the sites' data stay in their directories, the shares hold no row
    shares = sorted(tmp_path.glob("*/outbox/*.dpshare"))  # one outbox per site
    assert [s.parent.parent.name for s in shares] == ["east", "north", "south"]
    for share in shares:
        assert b"patient_id" not in share.read_bytes() and b"north-1," not in share.read_bytes()
    # a second run of the aggregator changes nothing and charges nothing
    again = subprocess.run(
        [
            BIN / "dprelease",
            "consortium",
            "aggregate",
            "--consortium",
            "consortium.yaml",
            "--spec",
            "spec.yaml",
            "--public-key",
            "keyholder/public.key",
            *[arg for site in ("north", "south", "east") for arg in ("--shares", f"{site}/outbox")],
            "--out",
            "aggregator",
            "--ledger",
            "aggregator/ledger.sqlite",
            "--config",
            "privacy.yaml",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 0, again.stderr
    assert "already published from these shares" in again.stdout


def test_a_refusal_is_one_line_naming_the_field(tmp_path: Path) -> None:
    (tmp_path / "consortium.yaml").write_text(
        "consortium:\n  name: h\n  sites: [a, b]\n  rho: 1/10\n  tolerate: 2\n"
    )
    done = subprocess.run(
        [
            BIN / "dprelease",
            "consortium",
            "contribute",
            "--consortium",
            "consortium.yaml",
            "--spec",
            "spec.yaml",
            "--site",
            "a",
            "--data",
            "a.csv",
            "--public-key",
            "k",
            "--out",
            "o",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "consortium.tolerate" in done.stderr


@pytest.mark.races
def test_a_site_killed_while_contributing_sends_one_whole_share(tmp_path: Path) -> None:
    """SIGKILL at several points of `contribute`: the outbox holds no share or a whole one, which
    is the stored one; the run after every kill ends with the same bytes as the first that
    finished (a re-run never draws fresh noise once a share was stored)."""
    walk = run_walkthrough(tmp_path, upto=2)  # the files and the key pair (keygen)
    assert walk.returncode == 0, walk.stderr
    assert (tmp_path / "keyholder" / "public.key").exists()
    command = [
        BIN / "dprelease",
        "consortium",
        "contribute",
        "--consortium",
        "consortium.yaml",
        "--spec",
        "spec.yaml",
        "--site",
        "south",
        "--data",
        "south/admissions.csv",
        "--public-key",
        "keyholder/public.key",
        "--store",
        "killed/store",
        "--out",
        "killed/out",
    ]
    seen: set[bytes] = set()
    for delay in (0.3, 1.0, 1.6, 2.2, 3.0):
        process = subprocess.Popen(
            command, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        time.sleep(delay)
        process.send_signal(signal.SIGKILL)
        process.wait()
        for share in (tmp_path / "killed").glob("*/*.dpshare"):
            seen.add(share.read_bytes())
    finished = subprocess.run(command, cwd=tmp_path, capture_output=True, timeout=120)
    assert finished.returncode == 0
    out = next((tmp_path / "killed" / "out").glob("*.dpshare")).read_bytes()
    stored = next((tmp_path / "killed" / "store").glob("*.dpshare")).read_bytes()
    assert out == stored
    assert seen <= {out}  # whatever a killed run left was whole, and the one share of this site
