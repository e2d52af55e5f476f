"""A weighted spec through every face: the API on pandas (ε and ρ), the `dprelease` command
(plan against the manifest of the release it plans, files), and a Dagster materialization."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import dagster as dg
import pandas as pd
import polars as pl
import pytest
from helpers import ROOT
from typer.testing import CliRunner

import dprelease as dp
from dprelease.cli import app
from pipelines.definitions import build_definitions
from pipelines.resources import ConfidentialStore, LedgerResource, PrivacyPolicy, PublicStore

SPEC = """\
release:
  name: households_by_region
  source: households
  privacy_unit: pid
  max_rows_per_unit: 2
  max_rows_per_group: 1
  survey_weight: {column: w, upper: 500}
  group_by:
    - column: region
      domain: {values: [n, s, e]}
  statistics:
    - {name: people, kind: count}
    - {name: income, kind: sum, column: income, lower: 0, upper: 1000}
    - {name: mean_income, kind: mean, column: income, lower: 0, upper: 1000}
    - name: respondents
      kind: count
      survey_weight: {column: one, upper: 1}
"""
SURVEY = pd.DataFrame(
    {
        "pid": [1, 2, 3, 3, 4, 5],
        "region": ["n", "s", "s", "s", "e", "e"],
        "w": [120.0, 80.5, 300.0, 300.0, None, 900.0],  # a missing weight, one above W
        "income": [400.0, 250.0, 1000.0, 50.0, 700.0, 10.0],
        "one": [1.0] * 6,
    }
)
PRIVACY = ROOT / "examples" / "case_control.yaml"  # ε = 0.3


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    (tmp_path / "spec.yaml").write_text(SPEC)
    pl.from_pandas(SURVEY).write_parquet(tmp_path / "households.parquet")
    return tmp_path


def test_the_api_releases_a_weighted_spec_through_the_ledger(ws: Path) -> None:
    url = str(ws / "ledger.sqlite")
    dp.Ledger(url).close()  # a new, empty ledger
    first = dp.release(SURVEY, ws / "spec.yaml", epsilon="1/2", ledger=url, cap=1)
    assert first.charged and first.release_id == "households_by_region/-"
    table = first.table
    assert table.schema["people"] == pl.Float64 and table.schema["respondents"] == pl.Float64
    assert set(table.get_column("region")) == {"n", "s", "e"}
    manifest = first.manifest
    assert isinstance(manifest, dp.Manifest)
    weighted = {s.name: s.survey_weight for s in manifest.statistics}
    assert weighted["people"] is not None and weighted["people"].column == "w"
    assert weighted["respondents"] is not None and weighted["respondents"].column == "one"
    assert "survey weight" in manifest.nulls
    stated = {s.name: s for s in manifest.statistics}
    assert stated["people"].sensitivity == 2 * 500  # R·W
    assert stated["income"].sensitivity == 2 * 500 * 1000  # R·W·max(|L|, |U|)
    again = dp.release(SURVEY, ws / "spec.yaml", epsilon="1/2", ledger=url)
    assert not again.charged and again.table.equals(table)


@pytest.mark.parametrize("margins", [False, True], ids=["cells", "margins"])
def test_the_api_releases_a_weighted_spec_in_rho(ws: Path, margins: bool) -> None:
    """Gaussian noise from the weighted L2 bounds, charged in ρ; with margins each level has its
    own Δ2: the regions W·√2 (R = 2 rows, at most 1 a region), the total R·W."""
    (ws / "privacy.yaml").write_text(
        "privacy:\n  profile: {kind: constant, bound: 3000}\n  measure: zcdp\n"
        "  delta: 1.0e-9\n  rounding: 0.001\n"
    )
    if margins:
        (ws / "spec.yaml").write_text(SPEC.replace("  group_by:", "  margins: [[]]\n  group_by:"))
    url = str(ws / "ledger.sqlite")
    dp.Ledger(url).close()
    result = dp.release(SURVEY, ws / "spec.yaml", privacy=ws / "privacy.yaml", ledger=url)
    manifest = result.manifest
    assert isinstance(manifest, dp.Manifest) and manifest.format == "dprelease-manifest/3"
    assert "discrete Gaussian" in manifest.mechanism
    people = next(s for s in manifest.statistics if s.name == "people")
    assert people.kind == "count" and people.survey_weight is not None
    assert people.sensitivity == pytest.approx(500 * 2**0.5)  # W·C, C = √2
    if margins:
        assert people.levels is not None
        assert [level.sensitivity for level in people.levels] == pytest.approx(
            [500 * 2**0.5, 2 * 500]
        )
        total = result.table.filter(pl.col("level") == "total")["people"].item()
        assert total == pytest.approx(
            result.table.filter(pl.col("level") == "region")["people"].sum()
        )
    with dp.Ledger(url) as ledger:
        assert ledger.status("households_by_region")[0].unit == "ρ"


def invoke(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


def test_the_command_line_plans_and_releases_a_weighted_spec(ws: Path) -> None:
    spec = str(ws / "spec.yaml")
    planned = json.loads(invoke("plan", "--spec", spec, "--config", str(PRIVACY), "--json"))
    manifest = json.loads(
        invoke(
            "release",
            "--spec",
            spec,
            "--data",
            str(ws / "households.parquet"),
            "--config",
            str(PRIVACY),
            "--out",
            str(ws / "out"),
            "--ledger",
            str(ws / "l.sqlite"),
            "--cap",
            "0.3",
            "--json",
        )  # fmt: skip
    )
    stated = {s["name"]: s for s in manifest["statistics"]}
    assert planned["epsilon_total_exact"] == manifest["epsilon_total_exact"] == "3/10"
    for row in planned["statistics"]:
        if row["kind"] != "mean":
            entry = stated[row["name"]]
            assert (row["sensitivity"], row["scale"], row["moe95"], row["derivation"]) == (
                entry["sensitivity"],
                entry["noise_scale"],
                entry["moe95"],
                entry["derivation"],
            )
    assert stated["people"]["survey_weight"] == {"column": "w", "upper": 500.0}
    assert "weighted count" in stated["people"]["derivation"]
    written = json.loads((ws / "out" / "manifest.json").read_text())
    assert written["statistics"] == manifest["statistics"]
    released = pl.read_parquet(ws / "out" / "release.parquet")
    assert released.columns[:3] == ["region", "people", "people_moe95"]
    assert Fraction(written["epsilon_total_exact"]) == Fraction(3, 10)


def test_a_dagster_materialization_of_a_weighted_spec(ws: Path) -> None:
    specs = ws / "specs"
    specs.mkdir()
    (specs / "households.yaml").write_text(SPEC + "publish: {scope: households, share: 1/2}\n")
    confidential = ws / "confidential"
    confidential.mkdir()
    pl.from_pandas(SURVEY).write_parquet(confidential / "households.parquet")
    resources = {
        "confidential": ConfidentialStore(directory=str(confidential)),
        "public": PublicStore(directory=str(ws / "public")),
        "ledger": LedgerResource(url=str(ws / "ledger.sqlite")),
        "policy": PrivacyPolicy(config_path=str(PRIVACY)),
    }
    defs = build_definitions(specs, resources)
    result = defs.resolve_implicit_global_asset_job_def().execute_in_process(
        asset_selection=[dg.AssetKey("households_by_region")],
        instance=dg.DagsterInstance.ephemeral(),
    )
    assert result.success
    checks = result.get_asset_check_evaluations()
    assert checks and all(check.passed for check in checks)
    public = ws / "public" / "households_by_region" / "all"
    manifest = json.loads((public / "manifest.json").read_text())
    stated = {s["name"]: s for s in manifest["statistics"]}
    assert stated["people"]["survey_weight"] == {"column": "w", "upper": 500.0}
    assert stated["mean_income"]["reuses"] == ["income", "people"]
    assert pl.read_csv(public / "release.csv").height == 3
    with dp.Ledger(str(ws / "ledger.sqlite")) as ledger:
        status = ledger.status("households")[0]
        assert (status.spent, status.releases) == (Fraction(3, 20), 1)  # half of the cap 0.3
