"""When releases run by themselves: the monthly schedule and the publish-pending sensor; and the
privacy budget, which follows them."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

import dagster as dg

from dprelease.ledger import make_release_id
from dprelease.period import Period
from dprelease.spec import ResolvedSpec
from pipelines.ledger_state import Pending, unpublished
from pipelines.release_specs import publish_of
from pipelines.resources import LedgerResource, PublicStore

if TYPE_CHECKING:  # Dagster's type of `define_asset_job`'s result is not exported
    from dagster._core.definitions.unresolved_asset_job_definition import (
        UnresolvedAssetJobDefinition,
    )

NO_RETRIES = {"dagster/max_retries": "0"}
#: A release committed this recently is left to the run that is still writing its files.
SETTLE_MINUTES = 5


def previous_month(moment: datetime) -> str:
    """The reporting period (YYYY-MM) that ended before `moment`'s month began."""
    return str(Period(moment.year, moment.month).preceding())


def monthly_schedule(
    release: ResolvedSpec, job: UnresolvedAssetJobDefinition
) -> dg.ScheduleDefinition:
    """On the 1st at 02:00 UTC, release the month that just ended, if the spec has that period
    and the ledger has not released it; otherwise skip, saying why (shown on the tick)."""
    first, last = publish_of(release).first_period, publish_of(release).last_period

    @dg.schedule(
        name=f"{release.spec.name}_schedule",
        job=job,
        cron_schedule="0 2 1 * *",
        execution_timezone="UTC",
        description="On the 1st at 02:00 UTC: releases the month that just ended, once; skips "
        "(with the reason) months outside the spec's periods or already released.",
    )
    def schedule(
        context: dg.ScheduleEvaluationContext, ledger: LedgerResource
    ) -> dg.RunRequest | dg.SkipReason:
        period = previous_month(context.scheduled_execution_time)
        if first is not None and period < first:
            return dg.SkipReason(f"{period} is before the spec's first period {first}")
        if last is not None and period > last:
            return dg.SkipReason(
                f"{period} is after the spec's last period {last}: nothing left to release. "
                "Extend publish.last_period in the spec to release more months, or turn this "
                "schedule off."
            )
        with ledger.open() as book:
            stored = book.stored_release(make_release_id(release.spec.name, period))
        if stored is not None:
            return dg.SkipReason(f"{period} is already released; nothing to do")
        return dg.RunRequest(
            run_key=f"{release.spec.name}/{period}", partition_key=period, tags=NO_RETRIES
        )

    return schedule


def pending_sensor(release: ResolvedSpec, asset: dg.AssetsDefinition) -> dg.SensorDefinition:
    """Publishes releases the ledger holds but the public store lacks: the re-run returns the
    stored copy (nothing charged), checks it, and writes its files. Each stored release is asked
    for once (run key), so one whose checks fail is not retried forever; one committed less than
    SETTLE_MINUTES ago is left to its own run."""

    @dg.sensor(
        name=f"{release.spec.name}_publish_pending",
        target=[asset],
        minimum_interval_seconds=60,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=f"Publishes recorded but unpublished releases of {release.spec.name!r} "
        "from the ledger's stored copy; never charges.",
    )
    def sensor(ledger: LedgerResource, public: PublicStore) -> dg.SensorResult | dg.SkipReason:
        with ledger.open() as book:
            pending: list[Pending] = unpublished(
                book, [release], public, settle_minutes=SETTLE_MINUTES
            )
        if not pending:
            return dg.SkipReason("every recorded release is published")
        return dg.SensorResult(
            run_requests=[
                dg.RunRequest(
                    run_key=f"{p.release_id}#{p.charge_id}",
                    partition_key=p.period,
                    tags=NO_RETRIES,
                )
                for p in pending
            ]
        )

    return sensor


def budget_sensor(budget: dg.AssetsDefinition) -> dg.AutomationConditionSensorDefinition:
    """Evaluates the privacy budget's automation condition (it follows the releases,
    `pipelines.assets.FOLLOWS_RELEASES`); on by default, so the budget a UI shows is the
    ledger's without anyone materializing it by hand."""
    return dg.AutomationConditionSensorDefinition(
        "privacy_budget_follows_releases",
        target=[budget],
        run_tags=NO_RETRIES,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Materializes privacy_budget after releases have been materialized, once "
        "none is in progress.",
    )
