"""The README's demo: the whole pipeline on embedded defaults, from a fresh checkout.

Generates the demo data if absent, materializes every release (the monthly release for its last
three months) through the ledger and then the privacy budget, and prints where the files went and
what the ledger has spent. The runs go to the project's Dagster home (`.dprelease/dagster`, which
`dev.py` names in `.env`), so `dg dev` shows them. Running it again charges nothing: the ledger
returns the stored releases.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import dagster as dg
from rich.console import Console
from rich.table import Table

from pipelines.assets import BUDGET_KEY
from pipelines.definitions import defs
from pipelines.resources import LedgerResource, PublicStore

MONTHS_TO_RELEASE = 3
#: Dagster's step-by-step DEBUG log is for the UI; the demo prints a summary instead.
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def _instance() -> dg.DagsterInstance:
    """The project's persistent Dagster home: $DAGSTER_HOME, else `.dprelease/dagster`."""
    home = Path(os.environ.setdefault("DAGSTER_HOME", str(Path(".dprelease/dagster").resolve())))
    home.mkdir(parents=True, exist_ok=True)
    return dg.DagsterInstance.get()


def _releases(result: dg.ExecuteInProcessResult) -> list[tuple[str, str, str, str]]:
    """(release, period, what the ledger did, ε) for each release asset in a run."""
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
                    str(metadata["epsilon"].value),
                )
            )
    return rows


def main() -> int:
    console = Console(soft_wrap=True)
    instance = _instance()
    jobs = {job.name: defs.resolve_job_def(job.name) for job in defs.jobs or []}
    released = []
    for name, job in sorted(jobs.items()):
        if job.partitions_def is None:
            continue
        for period in job.partitions_def.get_partition_keys()[-MONTHS_TO_RELEASE:]:
            console.print(f"materializing {name} for {period} ...")
            released += _releases(
                job.execute_in_process(instance=instance, partition_key=period, run_config=QUIET)
            )
    console.print("materializing the unperiodic releases, then the privacy budget ...")
    released += _releases(
        jobs["publish_releases"].execute_in_process(instance=instance, run_config=QUIET)
    )
    defs.resolve_implicit_global_asset_job_def().execute_in_process(
        instance=instance, asset_selection=[BUDGET_KEY], run_config=QUIET
    )
    summary = Table(title="releases", title_justify="left")
    for column in ("release", "period", "ledger", "ε"):
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
            f"{float(scope.cap):.4f}",
            f"{float(scope.spent):.4f}",
            f"{float(scope.remaining):.4f}",
            str(scope.releases),
        )
    console.print(table)
    console.print(f"Dagster instance: {instance.root_directory}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
