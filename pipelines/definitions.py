"""The Dagster code location (`workspace.yaml` and `dg` load `defs` from here).

Everything is built from the spec files in `pipelines/specs/`: one confidential source asset per
source table, the privacy budget, and per spec a release asset and its public asset. Unperiodic
releases run in `publish_releases`; each monthly release gets a partitioned job and a schedule
that releases the month just ended.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from pipelines.assets import confidential_source, privacy_budget, release_assets
from pipelines.release_specs import SPECS_DIR, load_releases
from pipelines.resources import default_resources

#: Runs are never retried automatically: a retry after a crash is resumed by the ledger anyway,
#: and a silent retry policy must not be able to draw noise twice.
NO_RETRIES = {"dagster/max_retries": "0"}


def build_definitions(
    specs_dir: Path = SPECS_DIR, resources: dict[str, dg.ConfigurableResource] | None = None
) -> dg.Definitions:
    """Definitions for every spec in `specs_dir` (tests pass their own specs and resources)."""
    releases = load_releases(specs_dir)
    sources = [
        confidential_source(table) for table in sorted({r.loaded.spec.source for r in releases})
    ]
    assets: list[dg.AssetsDefinition] = [*sources, privacy_budget]
    unperiodic: list[dg.AssetKey] = [a.key for a in assets]
    jobs: list[dg.UnresolvedAssetJobDefinition] = []
    schedules: list[dg.ScheduleDefinition] = []
    for release in releases:
        pair = release_assets(release)
        assets += pair
        keys = [a.key for a in pair]
        if release.loaded.spec.period is None:
            unperiodic += keys
            continue
        job = dg.define_asset_job(
            f"{release.name}_monthly",
            selection=keys,
            tags=NO_RETRIES,
            description=f"Release {release.name!r} for one month.",
        )
        jobs.append(job)
        schedules.append(
            dg.build_schedule_from_partitioned_job(
                job,
                hour_of_day=2,
                name=f"{release.name}_schedule",
                description="Releases the month that just ended, on the 1st at 02:00 UTC.",
            )
        )
    jobs.append(
        dg.define_asset_job(
            "publish_releases",
            selection=unperiodic,
            tags=NO_RETRIES,
            description="Budget and every release without periods.",
        )
    )
    return dg.Definitions(
        assets=assets, jobs=jobs, schedules=schedules, resources=resources or default_resources()
    )


defs = build_definitions()
