"""Assets: confidential sources (external) → one release asset per spec file; the privacy budget.

A release asset does the whole release in one step: it records the release through the ledger
(charging the budget, or returning the stored copy), evaluates the blocking checks on the stored
copy, and writes the public files only when they pass. One step means every path that
materializes it — the UI, a backfill, the schedule, `dg launch`, the publish sensor — publishes
what it charged, and the checks still gate the files. A release that is recorded but has no
published files (a crash between commit and write, or a failed check) is listed by the
`privacy_budget` asset and re-published by a sensor (`pipelines.automation`), without a charge.

Metadata holds noisy values and spec-derived facts only.
"""

import json
import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from fractions import Fraction
from pathlib import Path

import dagster as dg
import polars as pl
from pydantic import Field

from dprelease.budget import budget_markdown, markdown_table, write_plots
from dprelease.errors import (
    BudgetExhausted,
    ConfigError,
    DPReleaseError,
    LedgerNotFound,
    UnknownScope,
)
from dprelease.files import unwritable_directory
from dprelease.ledger import Ledger, ScopeStatus
from dprelease.loss import typed_text
from dprelease.operator import LOGGER_NAME
from dprelease.publish import (
    Recorded,
    decide_budget,
    prepare,
    record_release,
    write_release_files,
)
from dprelease.spec import ResolvedSpec
from dprelease.statement import manifest_problems, preview
from pipelines.ledger_state import unpublished
from pipelines.release_specs import publish_of
from pipelines.resources import (
    ConfidentialStore,
    LedgerResource,
    PrivacyPolicy,
    PublicStore,
    ScopeProfile,
)

BUDGET_KEY = dg.AssetKey("privacy_budget")
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


#: After the library's words, what an operator does in Dagster about a refusal only production
#: meets (the ledger or the scope is not there and the run did not ask to create it).
PRODUCTION_HINTS: dict[type[DPReleaseError], str] = {
    LedgerNotFound: "In Dagster, DPRELEASE_LEDGER_URL must name the existing ledger; only the "
    "very first release into a new ledger is launched with run config create_scope: true",
    UnknownScope: "If this is the scope's first release, launch again with run config "
    "create_scope: true; otherwise check DPRELEASE_LEDGER_URL",
}


class _RunLog(logging.Handler):
    """The library's operator channel as warnings in one run's log."""

    def __init__(self, context: dg.AssetExecutionContext) -> None:
        super().__init__(logging.WARNING)
        self.context = context

    def emit(self, record: logging.LogRecord) -> None:
        self.context.log.warning(in_dagster_words(record.getMessage()))


@contextmanager
def operator_warnings_in_run_log(context: dg.AssetExecutionContext) -> Iterator[None]:
    """Forward the `dprelease.operator` logger (warnings that depend on the data: an empty period,
    an input changed since its release) to the run log, which stays inside the secure boundary;
    they never reach metadata."""
    handler = _RunLog(context)
    logger = logging.getLogger(LOGGER_NAME)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)


def in_dagster_words(text: str) -> str:
    """The library's words, with the Launchpad option where they name the CLI's flag."""
    return text.replace("--force-new", "run config force_new: true")


def refusal(exc: DPReleaseError) -> str:
    """A typed, data-free refusal in words for the run's error."""
    if isinstance(exc, BudgetExhausted):
        exc = exc.with_action(_budget_action(exc))
    hint = PRODUCTION_HINTS.get(type(exc))
    return in_dagster_words(str(exc)) + (f". {hint}" if hint else "")


def _budget_action(exc: BudgetExhausted) -> str:
    """What an operator can do about a refused budget in the pipeline, where a release's ε is
    its spec's `publish.share` of the scope's cap (no ε is typed): a smaller share while some
    budget remains, or a higher cap on purpose."""
    set_cap = f"`dprelease ledger set-cap {exc.scope} CAP --reason TEXT`"
    smaller = (
        f"lower the spec's publish.share to at most {typed_text(exc.remaining / exc.cap)}, or "
        if exc.remaining
        else ""
    )
    return f"To go on, {smaller}raise the scope's cap on purpose: {set_cap}."


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


def _scopes(book: Ledger) -> dict[str, ScopeStatus]:
    return {status.name: status for status in book.status()}


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


def check_results(
    release: ResolvedSpec, recorded: Recorded, scope: ScopeStatus, highest: Fraction
) -> list[dg.AssetCheckResult]:
    """The three blocking checks; each compares the stored release with public facts only."""
    expected = release.released_keys  # the key grid; with margins, every level's rows
    table = recorded.table
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
                "spent": float(scope.spent),
                "cap": float(scope.cap),
                "highest_cap": float(highest),
            },
        ),
        dg.AssetCheckResult(
            check_name="manifest_complete",
            passed=not problems,
            metadata={"problems": "; ".join(problems) or "none"},
        ),
    ]


def _preview(table: pl.DataFrame) -> dg.MetadataValue:
    """The first rows of the released table (of each level, with margins), with a caption."""
    shown = preview(table, rows=PREVIEW_ROWS)
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


def monthly_partitions(release: ResolvedSpec) -> dg.MonthlyPartitionsDefinition:
    """Reporting periods YYYY-MM from first_period to last_period (open-ended if none)."""
    publish = publish_of(release)
    last = publish.last  # Dagster's end date is exclusive: the month after
    end = None if last is None else str(last.following())
    first = publish.first_period
    assert first is not None, "load_release requires first_period for monthly specs"
    return dg.MonthlyPartitionsDefinition(start_date=first, end_date=end, fmt="%Y-%m")


def release_asset(release: ResolvedSpec) -> dg.AssetsDefinition:
    """The release asset of one spec file: ledger record, blocking checks, public files.

    A backfill runs one period per run (Dagster's default for partitioned assets): each month is
    its own ledger charge, so a refused month fails alone and earlier months stay published.
    """
    spec = release.spec
    partitions = monthly_partitions(release) if spec.period else None
    publish = publish_of(release)
    scope = publish.scope
    spec_file = release.path.name if release.path else spec.name

    @dg.asset(
        name=spec.name,
        group_name="releases",
        partitions_def=partitions,
        deps=[dg.AssetKey(spec.source)],
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
        try:
            privacy = policy.profiles()  # a bad profile fails here, before the ledger
            path = confidential.table_path(spec.source)
            with (
                operator_warnings_in_run_log(context),
                ledger.open(create=config.create_scope) as book,
            ):
                budget = decide_budget(
                    release,
                    privacy=privacy,
                    ledger=book,
                    may_open_scope=config.create_scope or not ledger.require_existing,
                )
                # spec, budget, schema and the public directory checked before the ledger changes
                prepared = prepare(path, release, budget, period=period)
                directory = public.release_dir(spec.name, period)
                if (problem := unwritable_directory(directory)) is not None:
                    raise ConfigError("public.directory", problem)
                recorded = record_release(
                    prepared,
                    ledger=book,
                    run_id=context.run.run_id,
                    force_new=config.force_new,
                    on_stage=context.log.info,
                )
                status = book.status(scope)[0]
                highest = highest_cap(book, status)
        except DPReleaseError as exc:  # typed, data-free messages: the refusal in words
            raise dg.Failure(f"{spec.name} {period or ''}".strip() + f": {refusal(exc)}") from None
        _observe_schema(context, spec.source, path)
        checks = check_results(release, recorded, status, highest)
        failed = [str(c.check_name) for c in checks if not c.passed]
        if failed:
            published = f"no: check(s) {', '.join(failed)} failed; files withheld"
        else:
            write_release_files(recorded.stored, directory)
            published = f"yes: {directory}"
        words = in_dagster_words(recorded.describe())
        context.log.info(f"{recorded.release_id}: {words}; published {published}")
        return dg.MaterializeResult(
            metadata={
                "ledger": words,
                "charged": recorded.charged,
                "published": published,
                "release_id": recorded.release_id,
                "epsilon": recorded.stored.manifest["epsilon_total"],
                "scope": scope,
                "scope_cap": float(status.cap),
                "scope_spent": float(status.spent),
                "scope_remaining": float(status.remaining),
                "manifest": dg.MetadataValue.json(recorded.stored.manifest),
                "preview": _preview(recorded.table),
            },
            check_results=checks,
        )

    return release_


def privacy_budget_asset(releases: list[ResolvedSpec]) -> dg.AssetsDefinition:
    """Per budget scope: the profile's ε and plots, the ledger's cap and spending, and every
    release recorded but not published."""
    scopes = sorted({publish_of(r).scope for r in releases})

    @dg.asset(
        key=BUDGET_KEY,
        group_name="privacy",
        kinds={"python"},
        description="Per budget scope: ε_min from its odds risk profile (with plots), the "
        "ledger's cap (never above the profile's ε), spent and remaining, and releases "
        "recorded but not yet published.",
    )
    def privacy_budget(
        policy: PrivacyPolicy, ledger: LedgerResource, public: PublicStore
    ) -> dg.MaterializeResult:
        budgets = {scope: policy.scope_profile(scope) for scope in scopes}
        with ledger.open() as book:
            statuses = _scopes(book)
            pending = unpublished(book, releases, public)
            cap_changes = [e for s in scopes for e in book.history(s) if e.kind == "cap_changed"]
        rows, sections = [], []
        for scope, budget in budgets.items():
            choice, status = budget.choice, statuses.get(scope)
            directory = public.budget_dir(scope)
            plots = write_plots(choice, directory)
            (directory / "budget.json").write_text(
                json.dumps(choice.to_json_dict(), indent=2) + "\n"
            )
            note = _cap_note(scope, budget, status)
            waiting = [p.release_id for p in pending if p.scope == scope]
            rows.append(
                dg.TableRecord(
                    {
                        "scope": scope,
                        "epsilon_min": choice.epsilon_min,
                        "profile_epsilon": choice.epsilon,
                        "ledger_cap": None if status is None else float(status.cap),
                        "spent": 0.0 if status is None else float(status.spent),
                        "remaining": float(
                            budget.profile_cap if status is None else status.remaining
                        ),
                        "releases": 0 if status is None else status.releases,
                        "unpublished": len(waiting),
                        "note": note,
                    }
                )
            )
            sections.append(
                f"## Scope `{scope}`\n\n{note}\n\n"
                + (f"Recorded, not yet published: {', '.join(waiting)}\n\n" if waiting else "")
                + budget_markdown(choice, plots)
            )
        history = "".join(
            f"- {e.at:%Y-%m-%d %H:%M} UTC, {e.scope}: {e.detail} ({e.actor})\n" for e in cap_changes
        )
        return dg.MaterializeResult(
            metadata={
                "scopes": dg.MetadataValue.table(
                    records=rows,
                    schema=dg.TableSchema(
                        columns=[dg.TableColumn("scope", "string")]
                        + [
                            dg.TableColumn(c, "float")
                            for c in ("epsilon_min", "profile_epsilon", "ledger_cap", "spent")
                        ]
                        + [
                            dg.TableColumn("remaining", "float"),
                            dg.TableColumn("releases", "int"),
                            dg.TableColumn("unpublished", "int"),
                            dg.TableColumn("note", "string"),
                        ]
                    ),
                ),
                "unpublished": ", ".join(p.release_id for p in pending) or "none",
                "cap_changes": dg.MetadataValue.md(history or "No cap changes."),
                "report": dg.MetadataValue.md("\n\n".join(sections)),
                "plots": dg.MetadataValue.path(str(public.budget_dir())),
            }
        )

    return privacy_budget


def _cap_note(scope: str, budget: ScopeProfile, status: ScopeStatus | None) -> str:
    """The cap in force and how it relates to the profile, in words."""
    allowed = f"{float(budget.profile_cap):.6g}"
    if status is None:
        return f"Not in the ledger yet: its first release creates it with cap {allowed}."
    cap = f"{float(status.cap):.6g}"
    if status.cap > budget.profile_cap:
        return (
            f"The ledger's cap {cap} is above what the profile now allows ({allowed}): new "
            f"releases are refused until `dprelease ledger set-cap {scope} "
            f"{budget.profile_cap}`; released periods still re-run from the stored copy."
        )
    if status.cap < budget.profile_cap:
        return (
            f"Cap {cap} (the profile would allow {allowed}; the ledger's cap stays the limit "
            "until raised with `dprelease ledger set-cap`)."
        )
    return f"Cap {cap}, as the profile allows."
