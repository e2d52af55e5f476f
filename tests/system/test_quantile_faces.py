"""A quantile statistic through every face: `dprelease release` and `dprelease plan`, `dp.release`
on a pandas frame, and a Dagster materialization of a pipeline spec with a median; each
charges the ledger once and publishes the value and interval columns and the manifest entry."""

from __future__ import annotations

import json
import shutil
from fractions import Fraction
from pathlib import Path

import dagster as dg
import numpy as np
import pandas as pd
import polars as pl
import yaml
from helpers import MONTHLY, SCOPE, VISITS_CAP, materialize, resources, spent, write_tables
from typer.testing import CliRunner

import dprelease as dp
from dprelease.cli import app
from dprelease.ledger import Ledger
from pipelines.definitions import build_definitions
from pipelines.release_specs import SPECS_DIR

SPEC = """\
release:
  name: incomes
  source: survey
  privacy_unit: pid
  max_rows_per_unit: 1
  group_by:
    - column: region
      domain: {values: [north, south]}
  statistics:
    - {name: people, kind: count}
    - {name: income, kind: quantile, column: income, lower: 0, upper: 200000, resolution: 100,
       p: [0.25, 0.5, 0.75]}
    - {name: stay, kind: median, column: stay, lower: 0, upper: 30, resolution: 1}
"""
COLUMNS = [
    "region",
    "people",
    "people_moe95",
    *(f"income_p{c}{s}" for c in (25, 50, 75) for s in ("", "_low", "_high", "_uninformative")),
    "stay",
    "stay_low",
    "stay_high",
    "stay_uninformative",
]


def survey(rows: int = 4_000) -> pd.DataFrame:
    rng = np.random.default_rng(5)
    return pd.DataFrame(
        {
            "pid": np.arange(rows),
            "region": rng.choice(["north", "south", "west"], rows),
            "income": rng.lognormal(np.log(30_000), 0.8, rows),
            "stay": rng.integers(0, 20, rows).astype(float),
        }
    )


def monotone(table: pl.DataFrame) -> bool:
    parts = [table[f"income_p{c}"] for c in (25, 50, 75)]
    return bool(((parts[0] <= parts[1]) & (parts[1] <= parts[2])).all())


def test_dprelease_release_and_plan_on_the_command_line(tmp_path: Path) -> None:
    (tmp_path / "spec.yaml").write_text(SPEC)
    pl.from_pandas(survey()).write_parquet(tmp_path / "survey.parquet")
    runner = CliRunner(env={"COLUMNS": "120"})
    args = ["--spec", str(tmp_path / "spec.yaml"), "--epsilon", "1"]
    planned = runner.invoke(app, ["plan", *args])
    assert planned.exit_code == 0, planned.output
    assert "quantiles: 95% errors in ranks" in planned.output and "income_p50" in planned.output
    as_json = json.loads(runner.invoke(app, ["plan", *args, "--json"]).stdout)
    income = as_json["statistics"][1]
    assert income["kind"] == "quantile" and len(income["quantiles"]) == 3
    released = runner.invoke(
        app,
        [
            "release",
            *args,
            "--data",
            str(tmp_path / "survey.parquet"),
            "--cap",
            "2",
            "--ledger",
            str(tmp_path / "ledger.sqlite"),
            "--out",
            str(tmp_path / "out"),
        ],
    )
    assert released.exit_code == 0, released.output
    table = pl.read_parquet(tmp_path / "out" / "release.parquet")
    assert table.columns == COLUMNS and monotone(table)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    entry = manifest["statistics"][1]
    assert entry["kind"] == "quantile" and entry["interval_share"] == "1/10"
    assert manifest["statistics"][2]["interval_share"] == "1/40"  # a lone median
    assert [q["rank_error95"] for q in entry["quantiles"]] == [
        q["rank_error95"] for q in income["quantiles"]
    ]  # the plan states what the release states
    status = Ledger(str(tmp_path / "ledger.sqlite")).status("incomes")[0]
    assert (status.spent, status.releases) == (Fraction(1), 1)


def test_dp_release_on_a_pandas_frame(tmp_path: Path) -> None:
    spec = dp.ReleaseSpec.model_validate(yaml.safe_load(SPEC)["release"])
    result = dp.release(survey(), spec, epsilon="1/2")
    assert result.table.columns == COLUMNS and monotone(result.table)
    frame = result.to_pandas()
    assert (frame["stay_low"] <= frame["stay"]).all() and (
        frame["stay"] <= frame["stay_high"]
    ).all()
    kinds = [row.kind for row in result.accuracy]
    assert kinds == ["count", "quantile", "median"]
    assert result.accuracy[2].quantiles and result.accuracy[2].quantiles[0].column == "stay"


def test_a_dagster_materialization_of_a_spec_with_a_median(tmp_path: Path) -> None:
    """The demo's monthly visits with a median length of stay: one asset, one charge, every
    blocking check green, and the published files carry the median and its interval."""
    write_tables(tmp_path / "confidential")
    specs = tmp_path / "specs"
    shutil.copytree(SPECS_DIR, specs)
    monthly = specs / "visits_monthly.yaml"
    median = (
        "    - {name: median_stay, kind: median, column: length_of_stay, lower: 0, upper: 30, "
        "resolution: 1}\n  postprocess:"
    )
    monthly.write_text(monthly.read_text().replace("  postprocess:", median, 1))
    defs = build_definitions(specs, resources=resources(tmp_path))
    result = materialize(defs, dg.DagsterInstance.ephemeral(), [MONTHLY], "2024-03")
    assert result.success
    assert all(e.passed for e in result.get_asset_check_evaluations())
    assert spent(tmp_path, SCOPE) == (VISITS_CAP / 12, 1)
    published = tmp_path / "public" / MONTHLY / "2024-03"
    table = pl.read_parquet(published / "release.parquet")
    assert table.columns[-4:] == [
        "median_stay",
        "median_stay_low",
        "median_stay_high",
        "median_stay_uninformative",
    ]
    manifest = json.loads((published / "manifest.json").read_text())
    assert manifest["statistics"][-1]["kind"] == "median"
