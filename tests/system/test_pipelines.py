"""The Dagster code location in process: releases, backfills, ledger, schedule, sensor, no leaks."""

from __future__ import annotations

import io
import json
import logging
import shutil
import sqlite3
from collections.abc import Callable
from contextlib import closing
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path
from typing import Any

import dagster as dg
import polars as pl
import pytest

from dprelease.errors import ConfigError, SpecError
from dprelease.ledger import Ledger, make_release_id
from dprelease.mechanism.noise import NoiseSource
from dprelease.publish import PreparedRelease, Recorded, decide_budget, prepare, record_release
from pipelines.assets import BUDGET_KEY
from pipelines.definitions import build_definitions
from pipelines.demo_data import generate_case_control, generate_visits
from pipelines.release_specs import SPECS_DIR, load_release
from pipelines.resources import (
    ConfidentialStore,
    LedgerResource,
    PrivacyPolicy,
    PublicStore,
    deployment_resources,
)

MONTHLY = "visits_by_clinic"
PRIVACY = SPECS_DIR.parent / "privacy.yaml"
VISITS_CAP = Fraction(4)  # pipelines/privacy.yaml, scope hospital_patients: ½ ln 3000 → 4.0
STUDY_CAP = Fraction(3, 10)  # default profile (the paper's): ½ ln 2 rounded down to 0.30
SCOPE = "hospital_patients"  # the monthly release's budget scope


def write_tables(directory: Path, *, patients: int = 4_000, seed: int = 7) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    generate_case_control().write_parquet(directory / "case_control.parquet")
    generate_visits(seed=seed, n_patients=patients).write_parquet(directory / "visits.parquet")


def resources(
    root: Path, confidential: Path | None = None, privacy: Path = PRIVACY, **ledger: Any
) -> dict[str, dg.ConfigurableResource]:
    return {
        "confidential": ConfidentialStore(directory=str(confidential or root / "confidential")),
        "public": PublicStore(directory=str(root / "public")),
        "ledger": LedgerResource(url=str(root / "ledger.sqlite"), **ledger),
        "policy": PrivacyPolicy(config_path=str(privacy)),
    }


@pytest.fixture
def root(tmp_path: Path) -> Path:
    write_tables(tmp_path / "confidential")
    return tmp_path


def materialize(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    selection: list[str],
    partition: str | None = None,
    config: dict[str, Any] | None = None,
) -> dg.ExecuteInProcessResult:
    return dg.materialize(
        [a for a in defs.assets if isinstance(a, dg.AssetsDefinition)],
        instance=instance,
        resources=dict(defs.resources),
        selection=selection,
        partition_key=partition,
        run_config={"ops": {name: {"config": config} for name in selection}} if config else None,
        raise_on_error=False,
    )


def spent(root: Path, scope: str) -> tuple[Fraction, int]:
    status = Ledger(str(root / "ledger.sqlite")).status(scope)[0]
    return status.spent, status.releases


def failure(result: dg.ExecuteInProcessResult) -> str:
    error = result.get_step_failure_events()[0].event_specific_data.error
    return error.message.removeprefix(f"{dg.Failure.__module__}.Failure: ").rstrip("\n")


def files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.iterdir()}


def test_definitions_load_with_jobs_schedules_sensors_and_no_retries() -> None:
    from pipelines.definitions import defs

    keys = {a.key.to_user_string() for a in defs.assets}
    assert keys == {
        "case_control",
        "visits",
        "privacy_budget",
        MONTHLY,
        "case_control_by_genotype",
        "case_control_by_region",
    }
    graph = defs.resolve_asset_graph()
    sources = {k.to_user_string() for k in graph.external_asset_keys}
    assert sources == {"case_control", "visits"}  # external: observed, never materialized
    schedule = defs.resolve_schedule_def(f"{MONTHLY}_schedule")
    assert schedule.cron_schedule == "0 2 1 * *"
    job = defs.resolve_job_def(f"{MONTHLY}_monthly")
    assert job.tags["dagster/max_retries"] == "0"
    assert job.partitions_def.get_partition_keys()[0] == "2024-01"
    sensor = defs.resolve_sensor_def(f"{MONTHLY}_publish_pending")
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING
    release = next(a for a in defs.assets if a.key.to_user_string() == MONTHLY)
    assert release.op.retry_policy is None
    checks = {c.name for c in release.check_specs}
    assert checks == {"all_public_keys_present", "ledger_within_cap", "manifest_complete"}
    assert all(c.blocking and c.partitions_def is not None for c in release.check_specs)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("share: 1/12", "share: 0"), r"publish\.share: .*\(0, 1\]"),
        (("share: 1/12", "share: lots"), r"publish\.share: .*fraction"),
        (("  first_period: 2024-01\n", ""), r"publish\.first_period: .*first period"),
        (("publish:", "published:"), r"a pipeline spec needs .* `release:` and `publish:`"),
        (("upper: 2000", "upper: -1"), r"release\.statistics\[1\]: lower .* must be < upper"),
        (("name: visits_by_clinic", "name: visits"), r"release\.name: .* source table 'visits'"),
    ],
)
def test_bad_pipeline_specs_name_file_and_field(
    tmp_path: Path, edit: tuple[str, str], message: str
) -> None:
    specs = tmp_path / "specs"
    shutil.copytree(SPECS_DIR, specs)
    monthly = specs / "visits_monthly.yaml"
    assert edit[0] in monthly.read_text()
    monthly.write_text(monthly.read_text().replace(*edit))
    with pytest.raises(SpecError, match=rf"visits_monthly\.yaml: {message}"):
        build_definitions(specs, resources=resources(tmp_path))


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
    assert rows["hospital_patients"]["profile_cap"] == "4"
    assert rows["hospital_patients"]["ledger_cap"] == "4"
    assert rows["case_control_study"]["epsilon_min"] == "≈ 0.3466"
    assert rows["case_control_study"]["spent"] == "0.3"
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
    shutil.copytree(SPECS_DIR, specs)
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


def _prepared_month(
    root: Path, book: Ledger, period: str, spec: Path = SPECS_DIR / "visits_monthly.yaml"
) -> PreparedRelease:
    """The monthly release of `period` at ε = VISITS_CAP / 12, its scope in `book`."""
    book.ensure_scope(SCOPE, VISITS_CAP)
    release = load_release(spec)
    budget = decide_budget(release, ledger=book, epsilon=VISITS_CAP / 12)
    return prepare(root / "confidential/visits.parquet", release, budget, period=period)


def record_unpublished(root: Path, period: str, **options: Any) -> Recorded:
    """Record a month as a run that crashed after the ledger commit leaves it: stored, no files."""
    with Ledger(str(root / "ledger.sqlite")) as book:
        prepared = _prepared_month(root, book, period)
        return record_release(prepared, ledger=book, asset=MONTHLY, **options)


def _stored_with_a_cut_table(
    root: Path,
    period: str,
    cut: Callable[[pl.DataFrame], pl.DataFrame],
    spec: Path = SPECS_DIR / "visits_monthly.yaml",
) -> None:
    """A stored copy whose table lost rows (`cut`), committed through the ledger's API (as an
    engine that dropped empty cells, or another tool, could have stored it)."""
    with Ledger(str(root / "ledger.sqlite")) as book:
        prepared = _prepared_month(root, book, period, spec)
        reservation = book.reserve(
            make_release_id(MONTHLY, period),
            SCOPE,
            period,
            prepared.allocation.total.epsilon,
            spec_hash=prepared.resolved.hash,
        )
        released = prepared.draw()
        table = io.BytesIO()
        cut(released.table).write_parquet(table)
        manifest = released.manifest.model_copy(update={"release_id": reservation.release_id})
        book.commit(reservation, table.getvalue(), manifest.to_json_dict())


def _stored_without_a_cell(root: Path, period: str) -> None:
    _stored_with_a_cut_table(root, period, lambda table: table.slice(1))


def _stored_with_seeded_noise(root: Path, period: str) -> None:
    """A release drawn with the seeded test noise source (allowed by its caller) is stored: its
    manifest says its noise is not private."""
    record_unpublished(root, period, noise=NoiseSource.seeded_for_tests(1), allow_unsafe_noise=True)


def _stored_then_overspent(root: Path, period: str) -> None:
    """A ledger that has spent more than any cap it had: a charge edited by hand to ε = 5."""
    charge = record_unpublished(root, period).stored.charge_id
    with closing(sqlite3.connect(root / "ledger.sqlite")) as db, db:
        db.execute("UPDATE dprelease_charges SET epsilon = '5' WHERE charge_id = ?", (charge,))


@pytest.mark.parametrize(
    ("check", "store", "why"),
    [
        ("all_public_keys_present", _stored_without_a_cell, {"released_cells": 31}),
        ("ledger_within_cap", _stored_then_overspent, {"spent": "5", "highest_cap": "4"}),
        (
            "manifest_complete",
            _stored_with_seeded_noise,
            {"problems": "noise source is seeded: not a private release"},
        ),
    ],
)
def test_each_blocking_check_withholds_the_files_for_a_real_reason(
    root: Path, check: str, store: Callable[[Path, str], None], why: dict[str, object]
) -> None:
    """The ledger holds a month that fails one check: its run publishes nothing, charges
    nothing, fails only that check, and says why in the check's metadata."""
    store(root, "2024-06")
    before = spent(root, SCOPE)
    defs = build_definitions(resources=resources(root))
    result = materialize(defs, dg.DagsterInstance.ephemeral(), [MONTHLY], "2024-06")
    assert not result.success
    evaluations = result.get_asset_check_evaluations()
    assert {e.check_name for e in evaluations if not e.passed} == {check}
    failed = next(e for e in evaluations if e.check_name == check)
    assert {k: failed.metadata[k].value for k in why} == why
    metadata = result.asset_materializations_for_node(MONTHLY)[0].metadata
    assert metadata["charged"].value is False
    assert metadata["published"].value == f"no: check(s) {check} failed; files withheld"
    assert not (root / "public" / MONTHLY).exists()
    assert spent(root, SCOPE) == before


def test_recorded_but_unpublished_is_shown_and_published_by_the_sensor(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run that crashed after the ledger commit left no files: the budget lists it, the sensor
    asks for it once it has settled, and that run publishes the stored copy without a charge."""
    import pipelines.automation

    defs = build_definitions(resources=resources(root))
    crashed = record_unpublished(root, "2024-05")
    instance = dg.DagsterInstance.ephemeral()
    budget = materialize(defs, instance, ["privacy_budget"])
    assert budget.asset_materializations_for_node("privacy_budget")[0].metadata[
        "unpublished"
    ].value == (crashed.release_id)

    sensor = defs.resolve_sensor_def(f"{MONTHLY}_publish_pending")
    context = dg.build_sensor_context(
        instance=instance, resources=dict(defs.resources), definitions=defs
    )
    fresh = sensor.evaluate_tick(context)  # committed seconds ago: its run may still be writing
    assert not fresh.run_requests
    monkeypatch.setattr(pipelines.automation, "SETTLE_MINUTES", 0)
    result = sensor.evaluate_tick(context)
    assert [(r.partition_key, r.run_key) for r in result.run_requests] == [
        ("2024-05", f"{crashed.release_id}#{crashed.stored.charge_id}")
    ]
    run = materialize(defs, instance, [MONTHLY], "2024-05")
    assert run.success
    assert run.asset_materializations_for_node(MONTHLY)[0].metadata["charged"].value is False
    published = root / "public" / MONTHLY / "2024-05/release.parquet"
    assert published.read_bytes() == crashed.stored.table_parquet
    assert spent(root, SCOPE) == (VISITS_CAP / 12, 1)
    again = sensor.evaluate_tick(context)
    assert not again.run_requests and "every recorded release is published" in again.skip_message


def _tick(defs: dg.Definitions, when: datetime) -> dg.RunRequest | str:
    schedule = defs.resolve_schedule_def(f"{MONTHLY}_schedule")
    context = dg.build_schedule_context(
        scheduled_execution_time=when,
        resources=dict(defs.resources),
        repository_def=defs.get_repository_def(),
    )
    result = schedule.evaluate_tick(context)
    return result.run_requests[0] if result.run_requests else str(result.skip_message)


def test_schedule_releases_the_month_just_ended_once_and_stops_after_the_last(root: Path) -> None:
    defs = build_definitions(resources=resources(root))
    request = _tick(defs, datetime(2024, 4, 1, 2, tzinfo=UTC))
    assert isinstance(request, dg.RunRequest) and request.partition_key == "2024-03"
    assert materialize(defs, dg.DagsterInstance.ephemeral(), [MONTHLY], "2024-03").success
    assert (
        _tick(defs, datetime(2024, 4, 1, 2, tzinfo=UTC))
        == "2024-03 is already released; nothing to do"
    )
    last = _tick(defs, datetime(2025, 1, 1, 2, tzinfo=UTC))
    assert isinstance(last, dg.RunRequest) and last.partition_key == "2024-12"
    after = _tick(defs, datetime(2025, 2, 1, 2, tzinfo=UTC))
    assert isinstance(after, str) and after.startswith("2025-01 is after the spec's last period")
    before = _tick(defs, datetime(2024, 1, 1, 2, tzinfo=UTC))
    assert before == "2023-12 is before the spec's first period 2024-01"


def test_a_stricter_profile_refuses_new_months_until_set_cap(root: Path) -> None:
    """The ledger's cap is the source of truth but never above the profile's ε: after the
    profile shrinks, new months are refused (nothing charged) until the cap is lowered on
    purpose; a released month re-runs from the stored copy whatever the cap."""
    defs = build_definitions(resources=resources(root))
    instance = dg.DagsterInstance.ephemeral()
    assert materialize(defs, instance, [MONTHLY], "2024-01").success
    strict = root / "strict.yaml"
    strict.write_text(PRIVACY.read_text().replace("[1, 3000]", "[1, 400]"))  # ½ ln 400 → 2.95
    defs = build_definitions(resources=resources(root, privacy=strict))
    refused = materialize(defs, instance, [MONTHLY], "2024-02")
    assert not refused.success
    assert failure(refused) == (
        "visits_by_clinic 2024-02: budget scope 'hospital_patients' has cap ε = 4 in the ledger, "
        "more than the privacy profile allows (ε = 2.95); nothing was spent. Lower it with "
        "`dprelease ledger set-cap hospital_patients 2.95 --reason TEXT`, or change the profile"
    )
    assert materialize(defs, instance, [MONTHLY], "2024-01").success
    budget = materialize(defs, instance, ["privacy_budget"])
    scopes = budget.asset_materializations_for_node("privacy_budget")[0].metadata["scopes"]
    note = next(
        r.data["note"] for r in scopes.value.records if r.data["scope"] == "hospital_patients"
    )
    assert "new releases are refused until `dprelease ledger set-cap" in note
    assert spent(root, SCOPE) == (VISITS_CAP / 12, 1)


def test_set_cap_lower_then_rerun_released_months_charges_nothing(root: Path) -> None:
    defs = build_definitions(resources=resources(root))
    instance = dg.DagsterInstance.ephemeral()
    for month in ("2024-01", "2024-02"):
        assert materialize(defs, instance, [MONTHLY], month).success
    with Ledger(str(root / "ledger.sqlite")) as book:
        book.set_cap(SCOPE, Fraction(3), reason="board decision")
    for month in ("2024-01", "2024-02"):
        again = materialize(defs, instance, [MONTHLY], month)
        assert again.success
        metadata = again.asset_materializations_for_node(MONTHLY)[0].metadata
        assert metadata["charged"].value is False
        words = metadata["ledger"].value
        assert words.startswith("already released on ") and "nothing charged" in words
        assert words.endswith(
            "(stored with ε = 1/3 ≈ 0.333; this run asked for ε = 0.25: a release at that ε needs "
            "run config force_new: true and is charged)"
        )
    assert spent(root, SCOPE) == (2 * VISITS_CAP / 12, 2)
    new = materialize(defs, instance, [MONTHLY], "2024-03")
    assert new.asset_materializations_for_node(MONTHLY)[0].metadata["epsilon"].value == "0.25"
    assert spent(root, SCOPE) == (2 * VISITS_CAP / 12 + Fraction(1, 4), 3)
    budget = materialize(defs, instance, ["privacy_budget"])
    history = budget.asset_materializations_for_node("privacy_budget")[0].metadata["cap_changes"]
    assert "cap ε = 4 -> 3; reason: board decision" in history.value


def test_a_cap_lowered_below_what_was_spent_refuses_new_months_not_released_ones(
    root: Path,
) -> None:
    defs = build_definitions(resources=resources(root))
    instance = dg.DagsterInstance.ephemeral()
    for month in ("2024-01", "2024-02"):
        assert materialize(defs, instance, [MONTHLY], month).success
    with Ledger(str(root / "ledger.sqlite")) as book:
        book.set_cap(SCOPE, Fraction(1, 2), reason="no more releases")  # spent: 2/3
    again = materialize(defs, instance, [MONTHLY], "2024-01")
    assert again.success and all(e.passed for e in again.get_asset_check_evaluations())
    refused = materialize(defs, instance, [MONTHLY], "2024-03")
    assert not refused.success
    assert failure(refused).startswith(
        "visits_by_clinic 2024-03: privacy budget exhausted for scope 'hospital_patients': "
        "spent ε = 2/3 ≈ 0.667 of cap 0.5, requested 1/24 ≈ 0.0417"
    )
    assert spent(root, SCOPE) == (2 * VISITS_CAP / 12, 2)


def test_a_changed_spec_for_a_released_month_is_refused_unless_forced(root: Path) -> None:
    defs = build_definitions(resources=resources(root))
    instance = dg.DagsterInstance.ephemeral()
    assert materialize(defs, instance, [MONTHLY], "2024-01").success
    specs = root / "specs"
    shutil.copytree(SPECS_DIR, specs)
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


def test_production_requires_its_settings_and_never_makes_demo_data(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DPRELEASE_DEPLOYMENT", "production")
    for name in ("DPRELEASE_LEDGER_URL", "DPRELEASE_CONFIDENTIAL_DIR", "DPRELEASE_PRIVACY_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigError, match=r"^DPRELEASE_LEDGER_URL: the ledger URL must be set"):
        deployment_resources()
    monkeypatch.setenv("DPRELEASE_LEDGER_URL", str(tmp_path / "ledger.sqlite"))
    with pytest.raises(ConfigError, match=r"^DPRELEASE_CONFIDENTIAL_DIR: .*must be set"):
        deployment_resources()
    monkeypatch.setenv("DPRELEASE_CONFIDENTIAL_DIR", str(tmp_path / "empty"))
    with pytest.raises(ConfigError, match=r"^DPRELEASE_PRIVACY_CONFIG: .*must be set"):
        deployment_resources()
    monkeypatch.setenv("DPRELEASE_PRIVACY_CONFIG", str(PRIVACY))
    chosen = deployment_resources()
    assert isinstance(chosen["confidential"], ConfidentialStore)
    with pytest.raises(FileNotFoundError, match="confidential table 'visits' not found"):
        chosen["confidential"].table_path("visits")
    assert not (tmp_path / "empty").exists()
    monkeypatch.setenv("DPRELEASE_DEPLOYMENT", "staging")
    with pytest.raises(ConfigError, match=r"^DPRELEASE_DEPLOYMENT: unknown deployment 'staging'"):
        deployment_resources()


def test_production_opens_only_an_existing_ledger_and_scope_unless_asked(root: Path) -> None:
    """A missing ledger or scope is refused with nothing created, until a run asks for it."""
    defs = build_definitions(resources=resources(root, require_existing=True))
    instance = dg.DagsterInstance.ephemeral()
    fresh = materialize(defs, instance, [MONTHLY], "2024-01")
    assert not fresh.success
    assert "nothing was created" in failure(fresh)
    assert failure(fresh).endswith(
        "In Dagster, DPRELEASE_LEDGER_URL must name the existing ledger; only the very first "
        "release into a new ledger is launched with run config create_scope: true"
    )
    assert not (root / "ledger.sqlite").exists()
    first = materialize(defs, instance, [MONTHLY], "2024-01", {"create_scope": True})
    assert first.success  # the first release creates the ledger and its scope
    assert materialize(defs, instance, [MONTHLY], "2024-02").success
    unknown = materialize(defs, instance, ["case_control_by_genotype"])
    assert not unknown.success
    assert failure(unknown) == (
        f"case_control_by_genotype: unknown budget scope 'case_control_study' in ledger "
        f"sqlite:///{root / 'ledger.sqlite'}. If this is the scope's first release, launch "
        "again with run config create_scope: true; otherwise check DPRELEASE_LEDGER_URL"
    )
    assert [s.name for s in Ledger(str(root / "ledger.sqlite")).status()] == [SCOPE]
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
    shutil.copytree(SPECS_DIR, specs)
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
    _stored_with_a_cut_table(root, "2024-04", lambda table: table.head(40), spec=monthly)
    refused = materialize(defs, dg.DagsterInstance.ephemeral(), [MONTHLY], "2024-04")
    failed = [e for e in refused.get_asset_check_evaluations() if not e.passed]
    assert [e.check_name for e in failed] == ["all_public_keys_present"]
    assert failed[0].metadata["released_cells"].value == 40
    assert not (root / "public" / MONTHLY / "2024-04").exists()
