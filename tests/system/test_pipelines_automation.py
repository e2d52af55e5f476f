"""When releases run by themselves (`pipelines/automation.py`, `ledger_state.py`): the
publish-pending sensor and the monthly schedule."""

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


