"""The README's demo: the whole pipeline on embedded defaults, from a fresh checkout.

The demo's releases are the spec files bundled in `pipelines/specs/` (whatever
`DPRELEASE_SPECS_DIR` names), run on the demo deployment's resources; it refuses to run when
`DPRELEASE_DEPLOYMENT` names another deployment, so it never charges a real scope. It generates
the demo data if absent, materializes every release (a monthly one for its last three months)
through the ledger and then the privacy budget, and prints where the files went and what the
ledger has spent, each amount in its scope's unit (ε, or ρ for a zCDP scope). The runs go to the
project's Dagster home (`.dprelease/dagster`, which `dev.py` names in `.env`), so `dg dev` shows
them. Running it again charges nothing: the ledger returns the stored releases.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

import dagster as dg
from rich.console import Console
from rich.table import Table

from dprelease.errors import ConfigError
from pipelines.assets import LOSS_KEY
from pipelines.budget import BUDGET_KEY
from pipelines.messages import amount, loss_words
from pipelines.release_specs import SPECS_DIR
from pipelines.resources import (
    DEPLOYMENT_ENV,
    LedgerResource,
    PublicStore,
    demo_resources,
    deployment_name,
)

MONTHS_TO_RELEASE = 3
#: Dagster's step-by-step DEBUG log is for the UI; the demo prints a summary instead.
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
#: A release's loss in its metadata, by key, with the symbol it is shown with.
LOSS_SYMBOLS = {key: measure.symbol for measure, key in LOSS_KEY.items()}


def _instance() -> dg.DagsterInstance:
    """The project's persistent Dagster home: $DAGSTER_HOME, else `.dprelease/dagster`."""
    home = Path(os.environ.setdefault("DAGSTER_HOME", str(Path(".dprelease/dagster").resolve())))
    home.mkdir(parents=True, exist_ok=True)
    return dg.DagsterInstance.get()


def _loss(metadata: Mapping[str, dg.MetadataValue]) -> str:
    """The release's loss in its scope's unit (`ε = 1/3 ≈ 0.333`, `ρ = 0.0125`)."""
    key = next(key for key in LOSS_SYMBOLS if key in metadata)
    return f"{LOSS_SYMBOLS[key]} = {metadata[key].value}"


def _releases(result: dg.ExecuteInProcessResult) -> list[tuple[str, str, str, str]]:
    """(release, period, what the ledger did, its loss) for each release asset in a run."""
    rows = []
    for event in result.get_asset_materialization_events():
        materialization = event.materialization
        metadata = materialization.metadata
        if "ledger" in metadata:
            rows.append(
                (
                    materialization.asset_key.to_user_string(),
                    materialization.partition or "-",
                    str(metadata["ledger"].value),
                    _loss(metadata),
                )
            )
    return rows


def run_demo(defs: dg.Definitions, instance: dg.DagsterInstance, console: Console) -> int:
    """Materialize every release of `defs` (a monthly one for its last three months), then the
    privacy budget, and print what was released, where the files are and what the ledger spent.
    Exit code 1 if any run failed."""
    jobs = {job.name: defs.resolve_job_def(job.name) for job in defs.jobs or []}
    released, failed = [], []
    for name, job in sorted(jobs.items()):
        periods = job.partitions_def.get_partition_keys() if job.partitions_def else [None]
        for period in periods[-MONTHS_TO_RELEASE:]:
            console.print(f"materializing {name}" + (f" for {period} ..." if period else " ..."))
            result = job.execute_in_process(
                instance=instance, partition_key=period, run_config=QUIET, raise_on_error=False
            )
            released += _releases(result)
            failed += [] if result.success else [f"{name} {period or ''}".strip()]
    console.print("materializing the privacy budget ...")
    defs.resolve_implicit_global_asset_job_def().execute_in_process(
        instance=instance, asset_selection=[BUDGET_KEY], run_config=QUIET
    )
    summary = Table(title="releases", title_justify="left")
    for column in ("release", "period", "ledger", "loss"):
        summary.add_column(column)
    for row in released:
        summary.add_row(*row)
    console.print(summary)

    resources = defs.resources or {}
    public = resources["public"]
    assert isinstance(public, PublicStore)
    console.print(f"\npublic files in {Path(public.directory).resolve()}:")
    for path in sorted(Path(public.directory).rglob("*")):
        if path.is_file():
            console.print(f"  {path}")
    ledger = resources["ledger"]
    assert isinstance(ledger, LedgerResource)
    with ledger.open() as book:
        scopes, where = book.status(), book.display_url
    table = Table(title=f"ledger {where}", title_justify="left")
    for column in ("scope", "composition", "cap", "spent", "remaining", "releases"):
        table.add_column(column, justify="left" if column in {"scope", "composition"} else "right")
    for scope in scopes:
        table.add_row(
            scope.name,
            scope.composition,
            loss_words(scope, scope.cap),
            amount(scope.spent),
            amount(scope.remaining),
            str(scope.releases),
        )
    console.print(table)
    console.print(f"Dagster instance: {instance.root_directory}")
    if failed:
        console.print(f"failed: {', '.join(failed)} (see the runs in the UI)")
    return 1 if failed else 0


def _console() -> Console:
    """A terminal's width in a terminal; piped to a file or a CI log, wide enough that the
    tables are never cut (Rich would fit them into 80 columns, shortening a scope name to
    `hospital_pati…`), unless $COLUMNS asks for a width."""
    console = Console(soft_wrap=True)
    if console.is_terminal or "COLUMNS" in os.environ:
        return console
    return Console(soft_wrap=True, width=_PIPED_WIDTH)


#: A piped demo's table width: its widest table (a zCDP cap's "ρ = …, i.e. (ε, δ)-DP" beside
#: scope names of up to 200 characters) fits unwrapped.
_PIPED_WIDTH = 400


def main() -> int:
    console = _console()
    try:
        deployment = deployment_name()
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if deployment != "demo":
        print(
            f"error: {DEPLOYMENT_ENV}={deployment}: the demo runs only in the demo deployment "
            "(it releases the bundled demo specs, and would charge this deployment's ledger); "
            f"unset {DEPLOYMENT_ENV} to run it",
            file=sys.stderr,
        )
        return 2
    # imported here: importing the code location builds the deployment's definitions
    from pipelines.definitions import build_definitions

    return run_demo(build_definitions(SPECS_DIR, demo_resources()), _instance(), console)


if __name__ == "__main__":
    sys.exit(main())
