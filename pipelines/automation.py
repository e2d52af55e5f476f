"""When releases run by themselves: the monthly schedule and the publish-pending sensor; the
privacy budget, which follows them; and what a failed run leaves open in the ledger, told on its
run page."""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import TYPE_CHECKING

import dagster as dg

from dprelease.errors import LedgerNotFound
from dprelease.ledger import ScopeStatus, make_release_id
from dprelease.period import Period
from dprelease.spec import ResolvedSpec, SpecProblem
from pipelines.ledger_state import OpenReservation, Pending, open_reservations, unpublished
from pipelines.messages import loss_words
from pipelines.release_specs import publish_of
from pipelines.resources import LedgerResource, PublicStore

if TYPE_CHECKING:  # Dagster's type of `define_asset_job`'s result is not exported
    from dagster._core.definitions.unresolved_asset_job_definition import (
        UnresolvedAssetJobDefinition,
    )

NO_RETRIES = {"dagster/max_retries": "0"}
#: The run tag a failed run gets when it left reservations open: their release ids.
OPEN_RESERVATION_TAG = "dprelease/open_reservation"
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


def reservation_words(reservation: OpenReservation, scope: ScopeStatus) -> str:
    """What an operator reads on the page of a run that died holding a reservation."""
    release_id, period = reservation.release_id, reservation.period
    release = release_id.split("/")[0]
    again = f"{release} for {period}" if period else release
    return (
        f"{release_id}: this run reserved {loss_words(scope, reservation.amount)} of scope "
        f"{reservation.scope!r} (ledger charge {reservation.charge_id}) and stopped before the "
        "release was stored. The reservation stays open and counts as spent; nothing was "
        f"published. Launch {again} again with the same spec and share: it resumes this "
        "reservation and charges nothing more. To give the budget back instead: `dprelease "
        f"ledger void {release_id} --reason TEXT`."
    )


def open_reservation_sensor(releases: list[ResolvedSpec]) -> dg.SensorDefinition:
    """After any run of the code location fails (a refusal, a crash, or a run worker killed and
    found dead by run monitoring), says on the run's page whether it left a ledger reservation
    open, and that a relaunch resumes it free: an event in its log and a run tag. Dagster alone
    says only that the worker exited ("likely out of memory")."""
    scopes = sorted({publish_of(r).scope for r in releases})

    @dg.run_failure_sensor(
        name="open_reservation_on_failure",
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="When a run fails holding a ledger reservation (its worker died between "
        "charge and commit), writes into the run's log and tags what is open and that a "
        "relaunch of the same month resumes it without a second charge.",
    )
    def sensor(context: dg.RunFailureSensorContext, ledger: LedgerResource) -> None:
        run = context.dagster_run
        try:
            existing = ledger.open_existing()
        except LedgerNotFound:
            existing = None
        if existing is None:
            return  # no ledger (and none is created here): nothing could have been reserved
        with existing as book:
            statuses = {s.name: s for s in book.status() if s.name in scopes}
            held = [r for r in open_reservations(book, list(statuses)) if r.run_id == run.run_id]
        for reservation in held:
            words = reservation_words(reservation, statuses[reservation.scope])
            context.instance.report_engine_event(words, dagster_run=run)
        if held:
            ids = ", ".join(r.release_id for r in held)
            context.instance.add_run_tags(run.run_id, {OPEN_RESERVATION_TAG: ids})

    return sensor


def broken_specs_sensor(broken: dict[str, SpecProblem]) -> dg.SensorDefinition:
    """Launches each broken spec's asset once per problem (by run key), so a spec file that
    stopped loading shows as a failed run with its one line in the run list and a failed asset in
    the graph as soon as the code location loads, without anyone clicking *Materialize*. The run
    fails before any resource is touched; fixing the file (a new problem, or none) ends it."""

    @dg.sensor(
        name="broken_specs",
        asset_selection=list(broken),
        minimum_interval_seconds=60,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Shows every spec file that does not load as a failed run of its asset, "
        "once per problem.",
    )
    def sensor() -> dg.SensorResult:
        return dg.SensorResult(
            run_requests=[
                dg.RunRequest(
                    run_key=problem_key(problem),
                    asset_selection=[dg.AssetKey(key)],
                    tags=NO_RETRIES,
                )
                for key, problem in broken.items()
            ]
        )

    return sensor


def problem_key(problem: SpecProblem) -> str:
    """The run key of a broken spec's run: its file and a digest of its problem, so a file
    broken anew (another problem) is shown again."""
    digest = hashlib.sha256(problem.message.encode()).hexdigest()[:16]
    return f"{problem.path.name}#{digest}"
