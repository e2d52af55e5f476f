"""The Dagster code location `dprelease` (`dg dev` and `workspace.yaml` load `defs` from here).

Everything is built from the spec files in `pipelines/specs/`: one external asset per
confidential table, the privacy budget (with the sensor that has it follow the releases), and
per spec a release asset and a sensor that publishes anything recorded but unpublished.
Unperiodic releases run in `publish_releases`; each monthly release gets a partitioned job and a
schedule that releases the month just ended.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from pipelines.assets import confidential_source, privacy_budget_asset, release_asset
from pipelines.automation import NO_RETRIES, budget_sensor, monthly_schedule, pending_sensor
from pipelines.release_specs import SPECS_DIR, load_releases
from pipelines.resources import deployment_resources

#: Runs are never retried automatically (NO_RETRIES): a retry after a crash is resumed by the
#: ledger anyway, and a silent retry policy must not be able to draw noise twice.


def build_definitions(
    specs_dir: Path = SPECS_DIR, resources: dict[str, dg.ConfigurableResource] | None = None
) -> dg.Definitions:
    """Definitions for every spec in `specs_dir`; resources default to the deployment's."""
    releases = load_releases(specs_dir)
    sources = [confidential_source(table) for table in sorted({r.spec.source for r in releases})]
    budget = privacy_budget_asset(releases)
    assets: list[dg.AssetsDefinition] = [budget]
    unperiodic: list[dg.AssetKey] = []
    jobs = []
    schedules: list[dg.ScheduleDefinition] = []
    sensors: list[dg.SensorDefinition] = [budget_sensor(budget)]
    for release in releases:
        asset = release_asset(release)
        assets.append(asset)
        sensors.append(pending_sensor(release, asset))
        if release.spec.period is None:
            unperiodic.append(asset.key)
            continue
        job = dg.define_asset_job(
            f"{release.spec.name}_monthly",
            selection=[asset.key],
            tags=NO_RETRIES,
            description=f"Release {release.spec.name!r} for one month (ledger, checks, files).",
        )
        jobs.append(job)
        schedules.append(monthly_schedule(release, job))
    if unperiodic:
        jobs.append(
            dg.define_asset_job(
                "publish_releases",
                selection=unperiodic,
                tags=NO_RETRIES,
                description="Every release without periods.",
            )
        )
    return dg.Definitions(
        assets=[*sources, *assets],
        jobs=jobs,
        schedules=schedules,
        sensors=sensors,
        resources=resources or deployment_resources(),
    )


defs = build_definitions()
