"""Assets: confidential sources (external) → one release asset per spec file (the privacy budget
that follows them is in `pipelines.budget`).

A release asset does the whole release in one step: it records the release through the ledger
(charging the budget, or returning the stored copy), evaluates the blocking checks on the stored
copy, and writes the public files only when they pass. One step means every path that
materializes it — the UI, a backfill, the schedule, `dg launch`, the publish sensor — publishes
what it charged, and the checks still gate the files. A release that is recorded but has no
published files (a crash between commit and write, or a failed check) is listed by the
`privacy_budget` asset and re-published by a sensor (`pipelines.automation`), without a charge.

Metadata holds noisy values and spec-derived facts only. A spec file that does not load is a
broken release asset that fails with its one-line problem (`broken_spec_asset`).
"""

import warnings
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from fractions import Fraction
from pathlib import Path
from typing import Any

import dagster as dg
import polars as pl
from pydantic import Field

from dprelease.budget import markdown_table
from dprelease.errors import (
    ConfigError,
    DPReleaseError,
)
from dprelease.ledger import Ledger, ScopeStatus
from dprelease.loss import Measure
from dprelease.publish import (
    Recorded,
    decide_budget,
    prepare,
    record_release,
    release_folder_problem,
    write_release_files,
)
from dprelease.spec import ResolvedSpec, SpecProblem
from dprelease.statement import manifest_problems, preview
from pipelines.automation import NO_RETRIES
from pipelines.messages import (
    Refusal,
    amount,
    in_dagster_words,
    number_text,
    operator_warnings_in_run_log,
    refused,
)
from pipelines.release_specs import publish_of
from pipelines.resources import (
    ConfidentialStore,
    ConfidentialTableMissing,
    LedgerResource,
    PrivacyPolicy,
    PublicStore,
)

PREVIEW_ROWS = 20
CHECKS = {
    "all_public_keys_present": "The released table has exactly the public key grid (with "
    "margins: every level's rows), in order.",
    "ledger_within_cap": "The scope has spent no more than the highest cap it has had (every "
    "charge fits the cap of its day; a cap lowered below that refuses new releases, not the "
    "publication of released ones).",
    "manifest_complete": "The manifest states mechanism, sensitivity, noise scale, ε and the 95% "
    "margin of error of every released column.",
}


class ReleaseConfig(dg.Config):
    """What an operator may ask of one run (Launchpad or `dg launch --config-json`)."""

    force_new: bool = Field(
        default=False,
        description="Release a period that is already released as a NEW, charged release (a "
        "spec changed since it was released is refused without it, and an unchanged one returns "
        "the stored copy).",
    )
    create_scope: bool = Field(
        default=False,
        description="Production only: create this release's budget scope in the ledger (cap = "
        "its profile's ε), and the ledger itself if DPRELEASE_LEDGER_URL names none yet. Without "
        "it an unknown scope or ledger is refused, so a wrong URL never becomes a fresh budget.",
    )


def confidential_source(table: str) -> dg.AssetSpec:
    """A confidential table: external to Dagster (never materialized or copied by it); each
    release run observes its column schema."""
    return dg.AssetSpec(
        key=table,
        group_name="confidential",
        kinds={"parquet"},
        description=f"Confidential table {table!r} in the confidential store (never published). "
        "Observed by every release that reads it: column names and types only.",
    )


def _observe_schema(context: dg.AssetExecutionContext, table: str, path: Path) -> None:
    schema = pl.scan_parquet(path).collect_schema()  # column names and types, no values
    columns = [dg.TableColumn(name, str(dtype)) for name, dtype in schema.items()]
    context.log_event(
        dg.AssetObservation(
            asset_key=table, metadata={"dagster/column_schema": dg.TableSchema(columns=columns)}
        )
    )


# -- budget -------------------------------------------------------------------------------------


def highest_cap(book: Ledger, status: ScopeStatus) -> Fraction:
    """The largest cap the scope has had: now, at creation, or set since.

    A correct ledger never spends past it, whereas a cap lowered below what was already spent
    (allowed, and then no new release fits) must not fail the re-run of a released period.
    """
    caps = [
        e.epsilon
        for e in book.history(status.name)
        if e.kind in ("scope_created", "cap_changed") and e.epsilon is not None
    ]
    return max([status.cap, *caps])


# -- checks and words ---------------------------------------------------------------------------


def _released_grid(release: ResolvedSpec, table: pl.DataFrame) -> pl.DataFrame:
    """The keys the release must show: its public key grid, where the keys of a selected
    group-by (select: true) are the ones the stored table released (a DP output)."""
    for index in release.selected:
        columns = release.spec.group_by[index].key_columns
        if set(columns) <= set(table.columns):
            keys = table.select(columns).unique().sort(columns)
            release = release.with_keys(index, keys.cast(release.domains[index].schema))
    return release.released_keys


def check_results(
    release: ResolvedSpec, recorded: Recorded, scope: ScopeStatus, highest: Fraction
) -> list[dg.AssetCheckResult]:
    """The three blocking checks; each compares the stored release with public facts only."""
    table = recorded.table
    expected = _released_grid(release, table)  # the key grid; with margins, every level's rows
    if expected.width:
        present = set(expected.columns) <= set(table.columns)
        keys_ok = present and table.select(expected.columns).equals(expected)
    else:
        keys_ok = table.height == 1
    problems = manifest_problems(recorded.stored.manifest)
    return [
        dg.AssetCheckResult(
            check_name="all_public_keys_present",
            passed=keys_ok,
            metadata={"public_cells": max(expected.height, 1), "released_cells": table.height},
        ),
        dg.AssetCheckResult(
            check_name="ledger_within_cap",
            passed=scope.spent <= highest,
            metadata={
                "spent": amount(scope.spent),
                "cap": amount(scope.cap),
                "highest_cap": amount(highest),
            },
        ),
        dg.AssetCheckResult(
            check_name="manifest_complete",
            passed=not problems,
            metadata={"problems": "; ".join(problems) or "none"},
        ),
    ]


def _cell(value: object) -> str:
    """A released value as people read it (`number_text`: 15,870,000, a margin of 108, not
    108.0), and a null as –."""
    return "–" if value is None else number_text(value)


def _preview(table: pl.DataFrame) -> dg.MetadataValue:
    """The first rows of the released table (of each level, with margins), with a caption."""
    shown = preview(table, rows=PREVIEW_ROWS, cell=_cell)
    rows = [row for block in shown.blocks for row in block]
    caption = f"Shown: {shown.caption} (all of them are in the published files)."
    return dg.MetadataValue.md(f"{caption}\n\n{markdown_table((shown.columns, rows))}")


def _partitioned_checks(
    name: str, partitions: dg.PartitionsDefinition | None
) -> list[dg.AssetCheckSpec]:
    """Blocking checks, evaluated per partition, so a refused month marks only its own checks.

    Per-partition checks are a Dagster preview feature: used on purpose, its warning silenced.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.PreviewWarning)
        return [
            dg.AssetCheckSpec(
                check, asset=name, blocking=True, description=text, partitions_def=partitions
            )
            for check, text in CHECKS.items()
        ]


# -- assets -------------------------------------------------------------------------------------


def _no_retries(context: dg.AssetExecutionContext) -> None:
    """Tag the run `dagster/max_retries=0` whatever launched it: the jobs, schedules and sensors
    of the code location tag their runs, but *Materialize* and a backfill in the UI run Dagster's
    implicit asset job, which has no tags of its own. Run retries read the tag when a run fails,
    so a release run is never retried automatically (a crashed run's reservation is resumed by
    its next launch, which an operator decides)."""
    run = context.run
    if any(run.tags.get(key) != value for key, value in NO_RETRIES.items()):
        context.instance.add_run_tags(run.run_id, NO_RETRIES)


def monthly_partitions(release: ResolvedSpec) -> dg.MonthlyPartitionsDefinition:
    """Reporting periods YYYY-MM from first_period to last_period (open-ended if none)."""
    publish = publish_of(release)
    last = publish.last  # Dagster's end date is exclusive: the month after
    end = None if last is None else str(last.following())
    first = publish.first_period
    assert first is not None, "load_release requires first_period for monthly specs"
    return dg.MonthlyPartitionsDefinition(start_date=first, end_date=end, fmt="%Y-%m")


def release_asset(
    release: ResolvedSpec,
    *,
    deps: Sequence[dg.AssetKey] = (),
    group_name: str = "releases",
    demo_source: Callable[[Path], None] | None = None,
) -> dg.AssetsDefinition:
    """The release asset of one spec file: ledger record, blocking checks, public files.

    A backfill runs one period per run (Dagster's default for partitioned assets): each month is
    its own ledger charge, so a refused month fails alone and earlier months stay published.
    `deps`: assets it needs besides its source (a local-DP wave); `demo_source` writes its source
    table's simulated demo data where the confidential store generates demo data.
    """
    spec = release.spec
    partitions = monthly_partitions(release) if spec.period else None
    publish = publish_of(release)
    scope = publish.scope
    spec_file = release.path.name if release.path else spec.name

    @dg.asset(
        name=spec.name,
        group_name=group_name,
        partitions_def=partitions,
        deps=[*deps, dg.AssetKey(spec.source)],
        check_specs=_partitioned_checks(spec.name, partitions),
        kinds={"polars", "parquet", "csv"},
        description=f"DP release {spec.name!r} from {spec.source!r}: recorded in the ledger "
        f"(scope {scope!r}, {publish.share} of its cap per release), then published "
        f"as parquet, CSV and manifest once its checks pass. Spec: {spec_file}",
    )
    def release_(
        context: dg.AssetExecutionContext,
        config: ReleaseConfig,
        confidential: ConfidentialStore,
        ledger: LedgerResource,
        policy: PrivacyPolicy,
        public: PublicStore,
    ) -> dg.MaterializeResult:
        period = context.partition_key if partitions else None
        _no_retries(context)
        try:
            privacy = policy.profiles()  # a bad profile fails here, before the ledger
            demo_table = Path(confidential.directory) / f"{spec.source}.parquet"
            if demo_source and confidential.generate_demo_data and not demo_table.exists():
                demo_source(demo_table)
            path = confidential.table_path(spec.source)
            existing = ledger.open_existing(create=config.create_scope)
            with operator_warnings_in_run_log(context), ExitStack() as closing:
                if existing is not None:
                    closing.enter_context(existing)
                budget = decide_budget(
                    release,
                    privacy=privacy,
                    ledger=existing,
                    new_ledger=existing is None,  # every scope new; the file not yet written
                    may_open_scope=config.create_scope or not ledger.require_existing,
                )
                # spec, budget, schema and the public directory checked before the ledger
                # changes, or is created
                prepared = prepare(path, release, budget, period=period)
                directory = public.release_dir(spec.name, period)
                if (problem := release_folder_problem(directory)) is not None:
                    raise ConfigError("public.directory", problem)
                book = existing or closing.enter_context(ledger.open(create=True))
                recorded = record_release(
                    prepared,
                    ledger=book,
                    run_id=context.run.run_id,
                    force_new=config.force_new,
                    on_stage=context.log.info,
                )
                status = book.status(scope)[0]
                highest = highest_cap(book, status)
        except (DPReleaseError, ConfidentialTableMissing) as exc:  # typed and data-free
            raise refused(spec.name, period, scope, exc) from None
        _observe_schema(context, spec.source, path)
        checks = check_results(release, recorded, status, highest)
        failed = [str(c.check_name) for c in checks if not c.passed]
        if failed:
            published = f"no: check(s) {', '.join(failed)} failed; files withheld"
        else:
            formats = None if release.publish is None else release.publish.formats
            write_release_files(recorded.stored, directory, formats)
            published = f"yes: {directory}"
        words = in_dagster_words(recorded.describe())
        context.log.info(f"{recorded.release_id}: {words}; published {published}")
        return dg.MaterializeResult(
            metadata={
                "ledger": words,
                "charged": recorded.charged,
                "published": published,
                "release_id": recorded.release_id,
                "measure": measure_text(status.measure, status.delta),
                # the release's loss, in its scope's unit: ε, or ρ for a zCDP scope
                LOSS_KEY[status.measure]: amount(recorded.stored.epsilon),
                "scope": scope,
                "scope_cap": amount(status.cap),
                "scope_spent": amount(status.spent),
                "scope_remaining": amount(status.remaining),
                **selection_metadata(recorded.stored.manifest),
                "manifest": dg.MetadataValue.json(recorded.stored.manifest),
                "preview": _preview(recorded.table),
            },
            check_results=checks,
        )

    return release_


def selection_metadata(manifest: dict[str, Any]) -> dict[str, Any]:
    """A release with keys selected from the data: per selection its τ, the δ it spent and how
    many keys it released, a DP output (the count of keys not selected is nowhere)."""
    metadata: dict[str, Any] = {}
    for entry in manifest.get("selections") or []:
        columns = entry["columns"]
        name = "+".join(columns)
        released = next(g["keys"] for g in manifest["group_by"] if g["columns"] == columns)
        metadata[f"selected_keys[{name}] (DP output)"] = released
        metadata[f"selection_tau[{name}]"] = entry["tau"]
        metadata[f"selection_delta[{name}]"] = entry["delta_spent"]
    return metadata


def broken_spec_asset(problem: SpecProblem, key: str) -> dg.AssetsDefinition:
    """A spec file that does not load, shown as what it is: a release asset (under the name it
    declares, when it can be read) whose description says why, and whose every materialization
    fails with that one line, before any resource, ledger or data is touched. The other spec
    files load and run as if it were not there."""
    file = problem.path.name

    @dg.asset(
        name=key,
        group_name="releases",
        kinds={"yaml"},
        tags={"dprelease/spec": "broken"},
        metadata={"spec_file": str(problem.path), "spec_error": problem.message},
        # the problem as code: the description is Markdown, and a YAML error quotes `<tokens>`
        description=f"BROKEN SPEC: {file} does not load, so this release cannot run. Fix the "
        "file (`dprelease validate` checks every spec without data) and reload the code "
        f"location.\n\n```\n{problem.message}\n```",
    )
    def broken() -> None:
        raise Refusal(problem.message, {"spec_file": str(problem.path), "refused": "SpecError"})

    return broken


#: The metadata entry of a release's loss: its scope's unit.
LOSS_KEY = {Measure.PURE: "epsilon", Measure.ZCDP: "rho"}


def measure_text(measure: Measure, delta: float | None) -> str:
    """What a scope's amounts are: ε of pure DP, or ρ of zCDP with its δ."""
    return "ε-DP (ε)" if measure is Measure.PURE else f"ρ-zCDP (ρ), δ = {delta:g}"
