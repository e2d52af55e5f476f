"""When releases run by themselves (`pipelines/automation.py`, `ledger_state.py`): the
publish-pending sensor and the monthly schedule; no run is ever retried automatically, and a run
that died holding a reservation says so on its page."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import pytest
from helpers import (
    MONTHLY,
    SCOPE,
    VISITS_CAP,
    materialize,
    record_unpublished,
    resources,
    spent,
)

from dprelease.publish import PreparedRelease
from pipelines.automation import OPEN_RESERVATION_TAG
from pipelines.definitions import build_definitions


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


def test_every_run_of_a_release_is_tagged_no_retries_whatever_launched_it(root: Path) -> None:
    """Materialize in the UI and a backfill run Dagster's implicit asset job, which has no tags:
    the release asset tags its own run `dagster/max_retries=0`, refused or not (run retries read
    the tag when a run fails). The jobs, schedules and sensors tag the runs they launch."""
    defs = build_definitions(resources=resources(root))
    instance = dg.DagsterInstance.ephemeral()
    released = materialize(defs, instance, [MONTHLY], "2024-01")
    unperiodic = materialize(defs, instance, ["case_control_by_genotype"])
    (root / "confidential" / "case_control.parquet").unlink()
    refused = materialize(defs, instance, ["case_control_by_region"])
    assert released.success and unperiodic.success and not refused.success
    for result in (released, unperiodic, refused):
        run = instance.get_run_by_id(result.run_id)
        assert run is not None and run.tags["dagster/max_retries"] == "0"
    assert defs.resolve_job_def(f"{MONTHLY}_monthly").tags["dagster/max_retries"] == "0"
    assert defs.resolve_job_def("publish_releases").tags["dagster/max_retries"] == "0"


def _die_after_the_reservation(self: PreparedRelease, *args: object, **kwargs: object) -> None:
    raise RuntimeError("the run worker died here")  # what a SIGKILL between charge and commit
    # leaves: the reservation, no stored release, no files


def test_a_run_that_died_holding_a_reservation_says_so_and_a_relaunch_resumes_it_free(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The failed-run sensor writes into the dead run's log and tags it: what it reserved, that
    nothing was published, and that a relaunch resumes the reservation without a second charge;
    the budget lists the open reservation; the relaunch charges nothing more."""
    defs = build_definitions(resources=resources(root))
    instance = dg.DagsterInstance.ephemeral()
    with monkeypatch.context() as crash:
        crash.setattr(PreparedRelease, "draw", _die_after_the_reservation)
        died = materialize(defs, instance, [MONTHLY], "2024-03")
    assert not died.success
    assert spent(root, SCOPE) == (VISITS_CAP / 12, 0)  # charged, not stored
    (root / "confidential" / "case_control.parquet").unlink()
    refusal = materialize(defs, instance, ["case_control_by_genotype"])
    assert not refusal.success  # refused before the ledger: a failed run that reserved nothing
    sensor = defs.resolve_sensor_def("open_reservation_on_failure")
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING
    for result in (died, refusal):
        [failed] = [e for e in result.all_events if e.event_type == dg.DagsterEventType.RUN_FAILURE]
        run = instance.get_run_by_id(result.run_id)
        assert run is not None
        context = dg.build_run_status_sensor_context(
            sensor_name=sensor.name,
            dagster_event=failed,
            dagster_instance=instance,
            dagster_run=run,
            resources=dict(defs.resources or {}),
        ).for_run_failure()
        sensor(context)
    told = [e.message for e in instance.all_logs(died.run_id) if "reserved" in e.message]
    assert told == [
        "visits_by_clinic/2024-03: this run reserved ε = 1/3 ≈ 0.333 of scope "
        "'hospital_patients' (ledger charge 1) and stopped before the release was stored. The "
        "reservation stays open and counts as spent; nothing was published. Launch "
        "visits_by_clinic for 2024-03 again with the same spec and share: it resumes this "
        "reservation and charges nothing more. To give the budget back instead: `dprelease "
        "ledger void visits_by_clinic/2024-03 --reason TEXT`."
    ]
    tags = instance.get_run_by_id(died.run_id).tags  # type: ignore[union-attr]
    assert tags[OPEN_RESERVATION_TAG] == "visits_by_clinic/2024-03"
    assert OPEN_RESERVATION_TAG not in instance.get_run_by_id(refusal.run_id).tags  # type: ignore[union-attr]
    budget = materialize(defs, instance, ["privacy_budget"])
    metadata = budget.asset_materializations_for_node("privacy_budget")[0].metadata
    [row] = [r.data for r in metadata["scopes"].value.records if r.data["scope"] == SCOPE]
    assert row["releases"] == "0 (1 open)"
    assert metadata["reserved"].value.startswith(
        "- visits_by_clinic/2024-03: ε = 1/3 ≈ 0.333 reserved "
    )
    listed = metadata["reserved"].value
    assert f"by run {died.run_id} (ledger charge 1), not stored: relaunch it" in listed
    again = materialize(defs, instance, [MONTHLY], "2024-03")
    assert again.success
    assert spent(root, SCOPE) == (VISITS_CAP / 12, 1)  # resumed: the one charge, now stored
