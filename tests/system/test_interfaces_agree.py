"""One budget decision: `dprelease plan`, `dprelease release`, `dp.plan`, `dp.release` and the
Dagster release asset spend and state the same for every spec in the repository.

Each interface is driven as a user drives it (the command through its entry point, the API on a
pandas frame, Dagster through a materialization), each into a fresh ledger, with only the privacy
configuration and the spec file given, so each must decide the release's ε (the spec's
`publish.share` of its scope's cap, from the scope's own profile) by the one library function.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import dagster as dg
import polars as pl
import pytest
from helpers import ROOT

import dprelease as dp
from pipelines.definitions import build_definitions
from pipelines.demo_data import generate_case_control, generate_visits
from pipelines.release_specs import SPECS_DIR, load_releases
from pipelines.resources import ConfidentialStore, LedgerResource, PrivacyPolicy, PublicStore

PRIVACY = ROOT / "pipelines" / "privacy.yaml"
SPECS = sorted(SPECS_DIR.glob("*.yaml"))
PERIOD = "2024-03"
#: What every interface must agree on, per statistic (and per level with margins).
FIELDS = ("epsilon_exact", "sensitivity", "noise_scale", "moe95")


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("confidential")
    generate_case_control().write_parquet(directory / "case_control.parquet")
    generate_visits(seed=3, n_patients=2_000).write_parquet(directory / "visits.parquet")
    return directory


def _period(spec: Path) -> str | None:
    return PERIOD if dp.ReleaseSpec.from_yaml(spec).period else None


def _stated(statistics: list[dict[str, Any]]) -> dict[str, tuple[Any, ...]]:
    """What each statistic states, from a manifest's or a plan's statistics."""
    stated = {}
    for entry in statistics:
        if entry["kind"] == "mean":
            continue  # a mean's margin is per cell; its parts are the count and the sum
        scale = entry.get("noise_scale", entry.get("scale"))
        stated[entry["name"]] = (
            entry["epsilon_exact"],
            entry["sensitivity"],
            scale,
            entry["moe95"],
        )
    return stated


def _cli(*args: str) -> str:
    run = subprocess.run(
        [sys.executable, "-c", "from dprelease.cli import main; main()", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stderr
    return run.stdout


@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.stem)
def test_plan_cli_api_and_dagster_agree(spec: Path, tables: Path, tmp_path: Path) -> None:
    release = dp.ReleaseSpec.from_yaml(spec)
    period = _period(spec)
    data = tables / f"{release.source}.parquet"
    when = [] if period is None else ["--period", period]

    planned = json.loads(_cli("plan", "--spec", str(spec), "--config", str(PRIVACY), "--json"))
    api_plan = dp.plan(spec, privacy=PRIVACY).model_dump(mode="json")
    cli_release = json.loads(
        _cli(
            "release",
            "--spec",
            str(spec),
            "--config",
            str(PRIVACY),
            "--data",
            str(data),
            "--ledger",
            str(tmp_path / "cli.sqlite"),
            "--out",
            str(tmp_path / "cli"),
            "--json",
            *when,
        )  # fmt: skip
    )
    dp.Ledger(str(tmp_path / "api.sqlite")).close()  # the API writes only to an existing ledger
    api_release = dp.release(
        pl.read_parquet(data).to_pandas(),  # the Python API on pandas, as a notebook has it
        spec,
        privacy=PRIVACY,
        ledger=str(tmp_path / "api.sqlite"),
        period=period,
    ).manifest.model_dump(mode="json")

    resources = {
        "confidential": ConfidentialStore(directory=str(tables)),
        "public": PublicStore(directory=str(tmp_path / "public")),
        "ledger": LedgerResource(url=str(tmp_path / "dagster.sqlite")),
        "policy": PrivacyPolicy(config_path=str(PRIVACY)),
    }
    defs = build_definitions(SPECS_DIR, resources)
    result = defs.resolve_implicit_global_asset_job_def().execute_in_process(
        asset_selection=[dg.AssetKey(release.name)],
        partition_key=period,
        instance=dg.DagsterInstance.ephemeral(),
    )
    assert result.success
    (event,) = result.get_asset_materialization_events()
    dagster_manifest = event.materialization.metadata["manifest"].value

    expected = _stated(planned["statistics"])
    assert expected, "every spec states at least one count or sum"
    assert planned["epsilon_total_exact"] == api_plan["epsilon_total_exact"]
    for manifest in (cli_release, api_release, dagster_manifest):
        assert manifest["epsilon_total_exact"] == planned["epsilon_total_exact"]
        assert _stated(manifest["statistics"]) == expected
    assert _stated(api_plan["statistics"]) == expected


def test_the_plan_spends_the_share_of_the_scopes_profile() -> None:
    """The outsiders' case: the monthly visits spec plans at 1/12 of its scope's ε = 4.0."""
    planned = dp.plan(SPECS_DIR / "visits_monthly.yaml", privacy=PRIVACY)
    assert planned.epsilon_total_exact == "1/3"
    visits = next(s for s in planned.statistics if s.name == "visits")
    assert visits.moe95 == 108


def test_every_repo_spec_is_a_pipeline_spec() -> None:
    assert [r.path for r in load_releases()] == SPECS
