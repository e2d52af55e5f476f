"""The README's demo: the whole pipeline on embedded defaults, from a fresh checkout.

Generates the demo data if absent, materializes the privacy budget and every release (the monthly
release for its last three months) through the ledger, and prints where the files went and what
the ledger has spent. Running it again releases nothing new: the ledger returns stored releases.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import dagster as dg
from rich.console import Console
from rich.table import Table

from dprelease.publish import STATUS_TEXT
from pipelines.definitions import defs
from pipelines.resources import LedgerResource, PublicStore

MONTHS_TO_RELEASE = 3
#: Dagster's step-by-step DEBUG log is for the UI; the demo prints a summary instead.
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def _instance() -> dg.DagsterInstance:
    """$DAGSTER_HOME if set (so `dagster dev` shows the runs), else a throwaway instance."""
    if os.environ.get("DAGSTER_HOME"):
        return dg.DagsterInstance.get()
    return dg.DagsterInstance.local_temp(tempfile.mkdtemp(prefix="dprelease-dagster-"))


def _releases(result: dg.ExecuteInProcessResult) -> list[tuple[str, str, str, str]]:
    """(release, period, what the ledger did, ε) for each release asset in a run."""
    rows = []
    for event in result.get_asset_materialization_events():
        materialization = event.materialization
        metadata = materialization.metadata
        if "ledger_status" in metadata:
            rows.append(
                (
                    materialization.asset_key.to_user_string(),
                    materialization.partition or "-",
                    STATUS_TEXT[metadata["ledger_status"].value],
                    f"{metadata['epsilon'].value:.4f}",
                )
            )
    return rows


def main() -> int:
    console = Console(soft_wrap=True)
    instance = _instance()
    jobs = {job.name: defs.resolve_job_def(job.name) for job in defs.jobs}
    console.print("materializing the privacy budget and the unperiodic releases ...")
    released = _releases(
        jobs["publish_releases"].execute_in_process(instance=instance, run_config=QUIET)
    )
    for name, job in sorted(jobs.items()):
        if job.partitions_def is None:
            continue
        for period in job.partitions_def.get_partition_keys()[-MONTHS_TO_RELEASE:]:
            console.print(f"materializing {name} for {period} ...")
            released += _releases(
                job.execute_in_process(instance=instance, partition_key=period, run_config=QUIET)
            )
    summary = Table(title="releases", title_justify="left")
    for column in ("release", "period", "ledger", "ε"):
        summary.add_column(column)
    for row in released:
        summary.add_row(*row)
    console.print(summary)

    public: PublicStore = defs.resources["public"]
    console.print(f"\npublic files in {Path(public.directory).resolve()}:")
    for path in sorted(Path(public.directory).rglob("*")):
        if path.is_file():
            console.print(f"  {path}")
    ledger = defs.resources["ledger"]
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
