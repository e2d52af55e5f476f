"""The code location as Dagster loads it (`pipelines/definitions.py`): its assets, jobs, schedules
and sensors."""

from __future__ import annotations

import dagster as dg
from helpers import (
    MONTHLY,
)


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
        "drug_use_answers",  # local DP (pipelines/local_dp.py): the randomized answers,
        "wave_drug_use_2025_06",  # their wave
        "drug_use_by_region",  # and its release
    }
    graph = defs.resolve_asset_graph()
    sources = {k.to_user_string() for k in graph.external_asset_keys}
    assert sources == {"case_control", "visits", "drug_use_answers"}  # observed, never made
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
