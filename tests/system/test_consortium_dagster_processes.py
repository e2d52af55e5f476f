"""The consortium's two Dagster code locations as their parties run them: each site's location
and the aggregator's in processes of their own (`dagster asset materialize`), each with its own
Dagster instance, directory and settings; the key holder's `dprelease consortium decrypt` in
between. The sensors are run in tests/system/test_consortium_pipelines.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import consortium_world  # noqa: F401  (skips without TenSEAL; fails in CI)
import numpy as np
import polars as pl
import pytest
from helpers import ROOT

from dprelease.consortium import make_keys

pytestmark = pytest.mark.e2e

BIN = Path(sys.executable).parent
SITES = ("north", "south", "east")
SPEC = """release:
  name: admissions
  source: admissions
  privacy_unit: pid
  max_rows_per_unit: 1
  period: {column: day, every: month, composition: sequential}
  group_by:
    - column: region
      domain: {values: [n, s]}
  statistics:
    - {name: admissions, kind: count}
"""
CONSORTIUM = "consortium:\n  name: hospitals\n  sites: [north, south, east]\n  rho: 1/10\n"
PRIVACY = "privacy:\n  profile: {kind: constant, bound: 3000}\n  measure: zcdp\n  delta: 1e-6\n"


#: The step runs in the party's `dagster asset materialize` process, not in a step process of
#: its own under it: the same asset code, half the Dagster start-ups (the multiprocess executor's
#: step processes are run by test_e2e_dagster.py's `dg dev`).
IN_PROCESS = '{"execution": {"config": {"in_process": {}}}}'


def materialize(module: str, asset: str, home: Path, settings: dict[str, str]) -> str:
    """`dagster asset materialize` of one asset of March 2025, in a process of its own with its
    own instance (`home`); its output, after checking it succeeded."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    environment = {**os.environ, "DAGSTER_HOME": str(home), **settings}
    done = subprocess.run(
        [
            str(BIN / "dagster"),
            "asset",
            "materialize",
            "-m",
            module,
            "--select",
            asset,
            "--partition",
            "2025-03-01",
            "--config-json",
            IN_PROCESS,
        ],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout + done.stderr


def test_sites_and_the_aggregator_as_separate_dagster_processes(tmp_path: Path) -> None:
    for name, text in (("spec", SPEC), ("consortium", CONSORTIUM), ("privacy", PRIVACY)):
        (tmp_path / f"{name}.yaml").write_text(text)
    public, secret = make_keys(tmp_path / "keyholder")
    common = {
        "DPRELEASE_CONSORTIUM_FILE": str(tmp_path / "consortium.yaml"),
        "DPRELEASE_CONSORTIUM_SPEC": str(tmp_path / "spec.yaml"),
        "DPRELEASE_CONSORTIUM_PUBLIC_KEY": str(public),
        "DPRELEASE_CONSORTIUM_START": "2025-01",
    }
    rng = np.random.default_rng(5)
    for site in SITES:
        folder = tmp_path / site
        folder.mkdir()
        pl.DataFrame(
            {
                "pid": [f"{site}{i}" for i in range(40)],
                "region": rng.choice(["n", "s"], 40).tolist(),
                "day": ["2025-03-04"] * 40,
            }
        ).with_columns(pl.col("day").str.to_date()).write_parquet(folder / "2025-03.parquet")
        shown = materialize(
            "pipelines.consortium.site",
            "consortium_share",
            folder / "dagster",
            {
                **common,
                "DPRELEASE_CONSORTIUM_SITE": site,
                "DPRELEASE_CONSORTIUM_DATA": str(folder / "{period}.parquet"),
                "DPRELEASE_CONSORTIUM_STORE": str(folder / "store"),
                # the consortium's channel: this site's outbox is its folder of the inbox
                "DPRELEASE_CONSORTIUM_OUTBOX": str(tmp_path / "inbox" / site),
            },
        )
        assert f"{site}17" not in shown  # a site's run shows no row (public facts only)
    aggregator = {
        **common,
        "DPRELEASE_CONSORTIUM_INBOX": str(tmp_path / "inbox"),
        "DPRELEASE_CONSORTIUM_WORK": str(tmp_path / "work"),
        "DPRELEASE_CONSORTIUM_OUT": str(tmp_path / "public"),
        "DPRELEASE_LEDGER_URL": str(tmp_path / "ledger.sqlite"),
        "DPRELEASE_PRIVACY_CONFIG": str(tmp_path / "privacy.yaml"),
    }
    home = tmp_path / "aggregator-dagster"
    materialize("pipelines.consortium.aggregator", "consortium_sum", home, aggregator)
    (summed,) = (tmp_path / "work").glob("*.dpsum")
    decrypted = subprocess.run(
        [
            str(BIN / "dprelease"),
            "consortium",
            "decrypt",
            "--secret-key",
            str(secret),
            "--sum",
            str(summed),
            "--out",
            str(summed.with_suffix(".totals.json")),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert decrypted.returncode == 0, decrypted.stderr
    materialize("pipelines.consortium.aggregator", "consortium_release", home, aggregator)
    folder = tmp_path / "public" / "admissions__2025-03"
    assert pl.read_csv(folder / "release.csv").height == 2
    facts = json.loads(folder.with_name(f"{folder.name}.consortium.json").read_text())
    assert facts["contributed"] == sorted(SITES) and facts["missing"] == []
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["noise_source"]["private"] is True and manifest["release_id"] == (
        "admissions/2025-03"
    )
