"""Assets: confidential sources → privacy budget → releases (recorded in the ledger) → public files.

Every release asset is built from a spec file by `release_assets`; it records the release through
the ledger and reports blocking checks, and only when they pass does its `public/<name>` asset
write files from the ledger's stored copy. Metadata holds noisy values and spec-derived facts only.
"""

import json
from fractions import Fraction

import dagster as dg
import polars as pl
from dagster import AssetExecutionContext

from dprelease.ledger import ScopeStatus, make_release_id
from dprelease.manifest import manifest_problems
from dprelease.publish import Recorded, record_release, write_release_files
from dprelease.release import prepare
from dprelease.report import budget_markdown, write_plots
from pipelines.release_specs import PipelineRelease
from pipelines.resources import (
    Budget,
    ConfidentialStore,
    LedgerResource,
    PrivacyPolicy,
    PublicStore,
)

BUDGET_KEY = dg.AssetKey("privacy_budget")
PREVIEW_ROWS = 20
CHECKS = {
    "all_public_keys_present": "The released table has exactly the public key grid, in order.",
    "ledger_within_cap": "The scope's spent budget is within its cap after this release.",
    "manifest_complete": "The manifest states mechanism, sensitivity, scale, ε and CI per column.",
}


def confidential_source(table: str) -> dg.AssetsDefinition:
    """A confidential table: located through the resource, never copied into Dagster storage."""

    @dg.asset(
        name=table,
        group_name="confidential",
        kinds={"parquet"},
        description=f"Confidential table {table!r} in the confidential store (never published).",
    )
    def source(confidential: ConfidentialStore) -> dg.MaterializeResult:
        path = confidential.table_path(table)
        schema = pl.scan_parquet(path).collect_schema()  # column names and types, no values
        columns = [dg.TableColumn(name, str(dtype)) for name, dtype in schema.items()]
        return dg.MaterializeResult(
            metadata={
                "path": dg.MetadataValue.path(str(path)),
                "dagster/column_schema": dg.TableSchema(columns=columns),
            }
        )

    return source


@dg.asset(
    key=BUDGET_KEY,
    group_name="privacy",
    kinds={"python"},
    description="ε from the configured odds risk profile: ε_min over all prior odds ratios P10.",
)
def privacy_budget(policy: PrivacyPolicy, public: PublicStore) -> dg.MaterializeResult:
    choice = policy.budget().choice
    directory = public.budget_dir()
    plots = write_plots(choice, directory)
    (directory / "budget.json").write_text(json.dumps(choice.to_json_dict(), indent=2) + "\n")
    adversaries = dg.MetadataValue.table(
        records=[
            dg.TableRecord(
                {
                    "name": row.name,
                    "q": row.q,
                    "q0": row.q0,
                    "p10": row.p10,
                    "bound": row.bound,
                    "epsilon_p10": row.epsilon,
                    "max_posterior_odds": row.max_posterior_odds_ratio,
                }
            )
            for row in choice.adversaries
        ],
        schema=dg.TableSchema(
            columns=[dg.TableColumn("name", "string")]
            + [
                dg.TableColumn(c, "float")
                for c in ("q", "q0", "p10", "bound", "epsilon_p10", "max_posterior_odds")
            ]
        ),
    )
    report = budget_markdown(choice, plots)
    return dg.MaterializeResult(
        metadata={
            "epsilon_min": choice.epsilon_min,
            "epsilon": choice.epsilon,
            "argmin_p10": choice.argmin_p10,
            "bound_at_argmin": choice.bound_at_argmin,
            "neighbours": choice.neighbours.value,
            "adversaries": adversaries,
            "report": dg.MetadataValue.md(report),
            "plots": dg.MetadataValue.path(str(directory)),
        }
    )


def monthly_partitions(release: PipelineRelease) -> dg.MonthlyPartitionsDefinition:
    """Reporting periods YYYY-MM from first_period to last_period (open-ended if none)."""
    end = None
    if release.publish.last_period:  # Dagster's end date is exclusive: the month after
        year, month = map(int, release.publish.last_period.split("-"))
        end = f"{year + month // 12}-{month % 12 + 1:02d}"
    return dg.MonthlyPartitionsDefinition(
        start_date=release.publish.first_period, end_date=end, fmt="%Y-%m"
    )


def check_results(
    release: PipelineRelease, recorded: Recorded, scope: ScopeStatus
) -> list[dg.AssetCheckResult]:
    """The three blocking checks; each compares the release with public facts only."""
    keys = release.loaded.spec.key_columns
    grid = release.loaded.key_grid()
    table = recorded.table
    keys_ok = table.select(keys).equals(grid) if keys else table.height == 1
    problems = manifest_problems(recorded.manifest)
    return [
        dg.AssetCheckResult(
            check_name="all_public_keys_present",
            passed=keys_ok,
            metadata={"public_cells": grid.height if keys else 1, "released_cells": table.height},
        ),
        dg.AssetCheckResult(
            check_name="ledger_within_cap",
            passed=scope.spent <= scope.cap,
            metadata={"spent": float(scope.spent), "cap": float(scope.cap)},
        ),
        dg.AssetCheckResult(
            check_name="manifest_complete",
            passed=not problems,
            metadata={"problems": "; ".join(problems) or "none"},
        ),
    ]


def _preview(table: pl.DataFrame) -> dg.MetadataValue:
    head = table.head(PREVIEW_ROWS)
    header = "| " + " | ".join(head.columns) + " |\n|" + "---|" * head.width + "\n"
    rows = "".join("| " + " | ".join(str(v) for v in row) + " |\n" for row in head.iter_rows())
    return dg.MetadataValue.md(header + rows)


def release_assets(release: PipelineRelease) -> list[dg.AssetsDefinition]:
    """The release asset (ledger) and its public asset (files) for one spec file.

    A backfill runs one period per run (Dagster's default for partitioned assets): each month is
    its own ledger charge, so one refused month fails alone and earlier months stay published.
    """
    spec = release.loaded.spec
    partitions = monthly_partitions(release) if spec.period else None
    composition = spec.period.composition if spec.period else "sequential"
    scope = release.publish.scope

    def epsilon(budget: Budget) -> Fraction:
        return budget.cap * release.publish.share

    @dg.asset(
        name=spec.name,
        group_name="releases",
        partitions_def=partitions,
        deps=[dg.AssetKey(spec.source), BUDGET_KEY],
        check_specs=[
            dg.AssetCheckSpec(name, asset=spec.name, blocking=True, description=text)
            for name, text in CHECKS.items()
        ],
        kinds={"polars"},
        description=f"DP release {spec.name!r} from {spec.source!r}, recorded in the ledger "
        f"(scope {scope!r}, {release.publish.share} of its cap per release). Spec: "
        f"{release.path.name}",
    )
    def release_asset(
        context: AssetExecutionContext,
        confidential: ConfidentialStore,
        ledger: LedgerResource,
        policy: PrivacyPolicy,
    ) -> dg.MaterializeResult:
        period = context.partition_key if partitions else None
        budget = policy.budget()
        prepared = prepare(
            confidential.table_path(spec.source),
            release.loaded,
            epsilon(budget),
            neighbours=budget.choice.neighbours,
            period=period,
        )
        with ledger.open() as book:
            book.ensure_scope(scope, budget.cap, composition)
            recorded = record_release(
                prepared, ledger=book, scope=scope, asset=spec.name, run_id=context.run.run_id
            )
            status = book.status(scope)[0]
        context.log.info(f"{recorded.release_id}: {recorded.status}")
        return dg.MaterializeResult(
            metadata={
                "release_id": recorded.release_id,
                "ledger_status": recorded.status,
                "charged": recorded.charged,
                "epsilon": recorded.manifest["epsilon_total"],
                "scope": scope,
                "scope_cap": float(status.cap),
                "scope_spent": float(status.spent),
                "scope_remaining": float(status.remaining),
                "manifest": dg.MetadataValue.json(recorded.manifest),
                "preview": _preview(recorded.table),
            },
            check_results=check_results(release, recorded, status),
        )

    @dg.asset(
        key=dg.AssetKey(["public", spec.name]),
        group_name="public",
        partitions_def=partitions,
        deps=[release_asset],
        kinds={"parquet", "csv"},
        description=f"Published files of {spec.name!r}: written from the ledger's stored copy "
        "once the release's checks pass.",
    )
    def public_asset(
        context: AssetExecutionContext,
        ledger: LedgerResource,
        policy: PrivacyPolicy,
        public: PublicStore,
    ) -> dg.MaterializeResult:
        period = context.partition_key if partitions else None
        release_id = make_release_id(spec.name, period)
        with ledger.open() as book:
            stored = book.stored_release(release_id)
        if stored is None:
            raise dg.Failure(
                f"{release_id} is not recorded in the ledger; materialize "
                f"{spec.name!r} for this period first"
            )
        files = write_release_files(stored, public.release_dir(spec.name, period))
        return dg.MaterializeResult(
            metadata={
                "release_id": release_id,
                "directory": dg.MetadataValue.path(str(public.release_dir(spec.name, period))),
                "files": ", ".join(sorted(files)),
            }
        )

    return [release_asset, public_asset]
