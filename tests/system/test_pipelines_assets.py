"""The release asset in process (`pipelines/assets.py`): one step from ledger to files, a month at a
time; refusals before the ledger changes; nothing published reveals the data."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import dagster as dg
import polars as pl
from helpers import (
    MONTHLY,
    PIPELINE_SPECS,
    SCOPE,
    STUDY_CAP,
    VISITS_CAP,
    failure,
    files,
    materialize,
    resources,
    spent,
    stored_with_a_cut_table,
    write_tables,
)

from dprelease.ledger import Ledger
from pipelines.budget import BUDGET_KEY
from pipelines.definitions import build_definitions


def test_every_release_publishes_in_one_step_and_checks_pass(root: Path) -> None:
    """Materializing only a release asset — what the UI and a backfill launch — publishes it."""
    defs = build_definitions(resources=resources(root))
    instance = dg.DagsterInstance.ephemeral()
    first = materialize(defs, instance, ["case_control_by_genotype", "case_control_by_region"])
    second = materialize(defs, instance, [MONTHLY], "2024-03")
    budget = materialize(defs, instance, ["privacy_budget"])
    assert first.success and second.success and budget.success
    evaluations = first.get_asset_check_evaluations() + second.get_asset_check_evaluations()
    assert len(evaluations) == 9 and all(e.passed for e in evaluations)
    assert {e.partition for e in second.get_asset_check_evaluations()} == {"2024-03"}
    for release, period in [
        ("case_control_by_genotype", "all"),
        ("case_control_by_region", "all"),
        (MONTHLY, "2024-03"),
    ]:
        assert sorted(files(root / "public" / release / period)) == [
            "manifest.json",
            "release.csv",
            "release.parquet",
        ]
    for scope in ("case_control_study", "hospital_patients"):
        assert set(files(root / "public/privacy_budget" / scope)) == {
            "budget.json",
            "profile.png",
            "epsilon.png",
        }
    metadata = second.asset_materializations_for_node(MONTHLY)[0].metadata
    assert metadata["ledger"].value == "released and charged" and metadata["charged"].value
    assert metadata["published"].value == f"yes: {root / 'public' / MONTHLY / '2024-03'}"
    assert metadata["preview"].value.startswith(  # the CLI's caption (statement.preview)
        "Shown: first 20 of 32 rows (all of them are in the published files)."
    )
    observed = instance.fetch_observations(dg.AssetKey("visits"), limit=1).records
    assert set(observed[0].asset_observation.metadata) == {"dagster/column_schema"}
    scopes = budget.asset_materializations_for_node("privacy_budget")[0].metadata["scopes"]
    rows = {r.data["scope"]: r.data for r in scopes.value.records}
    assert rows["hospital_patients"]["cap"] == "ε = 4"  # the ledger's, as the profile allows
    assert rows["case_control_study"]["spent"] == "0.3"
    assert rows["case_control_study"]["releases"] == "2"
    by_region = pl.read_csv(root / "public/case_control_by_region/all/release.csv")
    assert by_region.height == 16 and "Islands" in by_region.get_column("region").to_list()
    assert spent(root, "case_control_study") == (STUDY_CAP, 2)
    assert spent(root, SCOPE) == (VISITS_CAP / 12, 1)


def test_backfill_charges_each_month_once_and_rerun_returns_stored(root: Path) -> None:
    """A backfill launches one run per month; we run the same three runs in-process."""
    defs = build_definitions(resources=resources(root))
    instance = dg.DagsterInstance.ephemeral()
    for month in ("2024-01", "2024-02", "2024-03"):
        assert materialize(defs, instance, [MONTHLY], month).success
    assert spent(root, SCOPE) == (3 * VISITS_CAP / 12, 3)
    before = files(root / "public" / MONTHLY / "2024-02")
    again = materialize(defs, instance, [MONTHLY], "2024-02")
    assert again.success
    metadata = again.asset_materializations_for_node(MONTHLY)[0].metadata
    assert metadata["charged"].value is False
    assert metadata["ledger"].value.startswith("already released")
    assert files(root / "public" / MONTHLY / "2024-02") == before
    assert spent(root, SCOPE) == (3 * VISITS_CAP / 12, 3)


def run_warnings(instance: dg.DagsterInstance, result: dg.ExecuteInProcessResult) -> list[str]:
    return [
        entry.user_message
        for entry in instance.all_logs(result.run_id)
        if entry.level == logging.WARNING
    ]


def test_operator_warnings_reach_the_run_log_and_nothing_published(root: Path) -> None:
    """The library's operator channel (here: the input changed since the month was released)
    is a warning in the run's log, inside the boundary; metadata and files stay as they were."""
    defs = build_definitions(resources=resources(root))
    instance = dg.DagsterInstance.ephemeral()
    first = materialize(defs, instance, [MONTHLY], "2024-01")
    assert first.success and not run_warnings(instance, first)
    before = files(root / "public" / MONTHLY / "2024-01")
    write_tables(root / "confidential", seed=8)
    again = materialize(defs, instance, [MONTHLY], "2024-01")
    assert again.success
    [warning] = run_warnings(instance, again)
    assert "the input differs from the one released on" in warning
    metadata = again.asset_materializations_for_node(MONTHLY)[0].metadata
    assert not any("differs" in str(value.value) for value in metadata.values())
    assert files(root / "public" / MONTHLY / "2024-01") == before
    visits = root / "confidential" / "visits.parquet"
    pl.read_parquet(visits).filter(pl.col("visit_date").dt.month() != 2).write_parquet(visits)
    empty = materialize(defs, instance, [MONTHLY], "2024-02")
    assert empty.success
    assert run_warnings(instance, empty) == [
        "release 'visits_by_clinic': no input row is in period 2024-02; the released values are "
        "noise around 0. Check the period and the period column"
    ]


def _check_statuses(instance: dg.DagsterInstance) -> dict[str, set[str]]:
    """Partition → statuses of every evaluation of the release's checks."""
    statuses: dict[str, set[str]] = {}
    for check in ("all_public_keys_present", "ledger_within_cap", "manifest_complete"):
        key = dg.AssetCheckKey(dg.AssetKey(MONTHLY), check)
        for record in instance.event_log_storage.get_asset_check_execution_history(key, 50):
            statuses.setdefault(record.partition, set()).add(record.status.value)
    return statuses


def test_exhausted_budget_fails_only_that_month(root: Path) -> None:
    specs = root / "specs"
    shutil.copytree(PIPELINE_SPECS, specs)
    monthly = specs / "visits_monthly.yaml"
    monthly.write_text(monthly.read_text().replace("share: 1/12", "share: 1/3"))
    defs = build_definitions(specs, resources=resources(root))
    instance = dg.DagsterInstance.ephemeral()
    for month in ("2024-01", "2024-02", "2024-03"):
        assert materialize(defs, instance, [MONTHLY], month).success
    january = files(root / "public" / MONTHLY / "2024-01")
    refused = materialize(defs, instance, [MONTHLY], "2024-04")
    assert not refused.success
    message = failure(refused)
    assert message.startswith("visits_by_clinic 2024-04: privacy budget exhausted for scope")
    assert "remaining 0" in message
    assert not (root / "public" / MONTHLY / "2024-04").exists()
    assert files(root / "public" / MONTHLY / "2024-01") == january
    assert spent(root, SCOPE) == (VISITS_CAP, 3)
    statuses = _check_statuses(instance)
    assert {statuses[m].pop() for m in ("2024-01", "2024-02", "2024-03")} == {"SUCCEEDED"}
    assert "SUCCEEDED" not in statuses["2024-04"]


def test_bad_input_fails_before_the_ledger_changes(root: Path) -> None:
    """A table without a column the spec reads is refused in words, before the run creates its
    budget scope or charges anything."""
    visits = root / "confidential" / "visits.parquet"
    pl.read_parquet(visits).drop("cost").write_parquet(visits)
    defs = build_definitions(resources=resources(root))
    refused = materialize(defs, dg.DagsterInstance.ephemeral(), [MONTHLY], "2024-01")
    assert not refused.success
    assert "column 'cost': not found in the input" in failure(refused)
    assert Ledger(str(root / "ledger.sqlite")).status() == []
    assert not (root / "public" / MONTHLY).exists()


def test_a_changed_spec_for_a_released_month_is_refused_unless_forced(root: Path) -> None:
    defs = build_definitions(resources=resources(root))
    instance = dg.DagsterInstance.ephemeral()
    assert materialize(defs, instance, [MONTHLY], "2024-01").success
    specs = root / "specs"
    shutil.copytree(PIPELINE_SPECS, specs)
    monthly = specs / "visits_monthly.yaml"
    monthly.write_text(monthly.read_text().replace("upper: 2000", "upper: 3000"))
    changed = build_definitions(specs, resources=resources(root))
    refused = materialize(changed, instance, [MONTHLY], "2024-01")
    assert not refused.success
    assert failure(refused).startswith(
        "visits_by_clinic 2024-01: release 'visits_by_clinic/2024-01' was released on "
    )
    assert "release the changed spec anew with run config force_new: true" in failure(refused)
    assert "--force-new" not in failure(refused)
    assert spent(root, SCOPE) == (VISITS_CAP / 12, 1)
    forced = materialize(changed, instance, [MONTHLY], "2024-01", {"force_new": True})
    assert forced.success
    assert spent(root, SCOPE) == (2 * VISITS_CAP / 12, 2)


def _published(root: Path, confidential: Path) -> tuple[dict, dict]:
    """Metadata of every asset event and every published manifest, for one dataset."""
    defs = build_definitions(resources=resources(root, confidential))
    instance = dg.DagsterInstance.ephemeral()
    runs = [
        materialize(defs, instance, ["case_control_by_genotype", "case_control_by_region"]),
        materialize(defs, instance, [MONTHLY], "2024-05"),
        materialize(defs, instance, ["privacy_budget"]),
    ]
    metadata = {}
    for run in runs:
        assert run.success
        events = [e.materialization for e in run.get_asset_materialization_events()] + [
            e.asset_observation_data.asset_observation for e in run.get_asset_observation_events()
        ]
        for m in events:
            metadata[m.asset_key.to_user_string()] = {k: v.value for k, v in m.metadata.items()}
    manifests = {
        str(p.relative_to(root / "public")): json.loads(p.read_text())
        for p in (root / "public").rglob("manifest.json")
    }
    return metadata, manifests


def _public_facts(metadata: dict, manifests: dict) -> tuple[dict, dict]:
    """Drop what legitimately differs between two runs: noisy values, times, local paths."""
    noisy_or_local = {"preview", "manifest", "published", "plots"}
    facts = {
        asset: {k: v for k, v in values.items() if k not in noisy_or_local}
        for asset, values in metadata.items()
    }
    for asset, values in metadata.items():
        if "manifest" in values:
            facts[asset]["manifest"] = {
                k: v for k, v in values["manifest"].items() if k != "created_at"
            }
        if "published" in values:
            facts[asset]["published"] = values["published"].startswith("yes: ")
    return facts, {
        name: {k: v for k, v in m.items() if k != "created_at"} for name, m in manifests.items()
    }


def test_published_metadata_and_manifests_reveal_nothing_about_the_data(tmp_path: Path) -> None:
    """Two different confidential datasets, same specs: every published fact is identical."""
    write_tables(tmp_path / "a_data", patients=3_000, seed=1)
    write_tables(tmp_path / "b_data", patients=9_000, seed=2)
    a = _public_facts(*_published(tmp_path / "a", tmp_path / "a_data"))
    b = _public_facts(*_published(tmp_path / "b", tmp_path / "b_data"))
    assert a == b
    metadata, _ = a
    assert set(metadata["visits"]) == {"dagster/column_schema"}  # no row counts, no ranges
    assert BUDGET_KEY.to_user_string() in metadata
    # the published files are the ledger's stored (noisy) release, byte for byte
    release_id = metadata[MONTHLY]["release_id"]
    stored = Ledger(str(tmp_path / "a/ledger.sqlite")).stored_release(release_id)
    published = tmp_path / "a/public" / MONTHLY / "2024-05/release.parquet"
    assert stored is not None and published.read_bytes() == stored.table_parquet


def test_a_spec_with_margins_is_one_asset_one_charge_and_its_checks_mean_every_level(
    root: Path,
) -> None:
    """The demo's monthly spec with region totals and the grand total: one materialization,
    one ledger charge, the three checks green; the key check expects every level's rows."""
    specs = root / "specs"
    shutil.copytree(PIPELINE_SPECS, specs)
    monthly = specs / "visits_monthly.yaml"
    monthly.write_text(
        monthly.read_text().replace("  statistics:", "  margins: [[region], []]\n  statistics:")
    )
    defs = build_definitions(specs, resources=resources(root))
    assert {a.key.to_user_string() for a in defs.assets if isinstance(a, dg.AssetsDefinition)} >= {
        MONTHLY
    }
    result = materialize(defs, dg.DagsterInstance.ephemeral(), [MONTHLY], "2024-03")
    assert result.success
    evaluations = result.get_asset_check_evaluations()
    assert len(evaluations) == 3 and all(e.passed for e in evaluations)
    keys = next(e for e in evaluations if e.check_name == "all_public_keys_present")
    assert keys.metadata["public_cells"].value == 32 + 8 + 1
    assert spent(root, SCOPE) == (VISITS_CAP / 12, 1)
    metadata = result.asset_materializations_for_node(MONTHLY)[0].metadata
    assert metadata["preview"].value.startswith(  # the CLI's caption (statement.preview)
        "Shown: first 20 of 32 rows of region,clinic, 8 rows of region, 1 row of total (all of "
        "them are in the published files)."
    )
    table = pl.read_parquet(root / "public" / MONTHLY / "2024-03" / "release.parquet")
    assert table.get_column("level").unique(maintain_order=True).to_list() == [
        "region,clinic",
        "region",
        "total",
    ]
    # a stored copy that lost its grand total row: the key check withholds its files
    stored_with_a_cut_table(root, "2024-04", lambda table: table.head(40), spec=monthly)
    refused = materialize(defs, dg.DagsterInstance.ephemeral(), [MONTHLY], "2024-04")
    failed = [e for e in refused.get_asset_check_evaluations() if not e.passed]
    assert [e.check_name for e in failed] == ["all_public_keys_present"]
    assert failed[0].metadata["released_cells"].value == 40
    assert not (root / "public" / MONTHLY / "2024-04").exists()
