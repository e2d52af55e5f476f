"""The Dagster code location `dprelease` (`dg dev` and `workspace.yaml` load `defs` from here).

Everything is built from the spec files of the deployment's specs directory
(`DPRELEASE_SPECS_DIR`; in the demo the bundled `pipelines/specs/`): one external asset per
confidential table, the privacy budget (with the sensor that has it follow the releases), and
per spec a release asset and a sensor that publishes anything recorded but unpublished.
Unperiodic releases run in `publish_releases`; each monthly release gets a partitioned job and a
schedule that releases the month just ended. A spec file that does not load is one broken
release asset (its runs fail with the file's one-line problem, and a sensor launches one such run
per problem so the UI shows it failed) beside the others, which load and run as before; the
failed-run sensor tells a crashed run's reservation.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import dagster as dg

from dprelease.spec import SpecProblem
from pipelines.assets import broken_spec_asset, confidential_source, release_asset
from pipelines.automation import (
    NO_RETRIES,
    broken_specs_sensor,
    budget_sensor,
    monthly_schedule,
    open_reservation_sensor,
    pending_sensor,
)
from pipelines.budget import BUDGET_KEY, privacy_budget_asset
from pipelines.local_dp import local_assets, wave_scopes
from pipelines.release_specs import load_catalog
from pipelines.resources import deployment_resources, deployment_specs_dir

#: Runs are never retried automatically (NO_RETRIES): a retry after a crash is resumed by the
#: ledger anyway, and a silent retry policy must not be able to draw noise twice.


def build_definitions(
    specs_dir: Path | None = None, resources: dict[str, dg.ConfigurableResource] | None = None
) -> dg.Definitions:
    """Definitions for every spec in `specs_dir` (default: the deployment's); resources default
    to the deployment's."""
    catalog = load_catalog(specs_dir or deployment_specs_dir())
    releases = list(catalog.releases)
    tables = sorted({r.spec.source for r in releases})
    sources = [confidential_source(table) for table in tables]
    budget = privacy_budget_asset(releases, wave_scopes())
    assets: list[dg.AssetsDefinition] = [budget]
    unperiodic: list[dg.AssetKey] = []
    jobs = []
    schedules: list[dg.ScheduleDefinition] = []
    sensors: list[dg.SensorDefinition] = [budget_sensor(budget), open_reservation_sensor(releases)]
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
    taken = {BUDGET_KEY.to_user_string(), *tables, *(r.spec.name for r in releases)}
    broken: dict[str, SpecProblem] = {}
    for problem in catalog.problems:
        key = broken_key(problem, taken)
        taken.add(key)
        broken[key] = problem
        dg.get_dagster_logger("dprelease").warning(f"spec file not loaded: {problem.message}")
        assets.append(broken_spec_asset(problem, key))
    if broken:
        sensors.append(broken_specs_sensor(broken))
    return dg.Definitions(
        assets=[*sources, *assets, *local_assets()],
        jobs=jobs,
        schedules=schedules,
        sensors=sensors,
        resources=resources or deployment_resources(),
    )


def broken_key(problem: SpecProblem, taken: set[str]) -> str:
    """The asset name of a spec file that does not load: the release name it declares (so the
    UI shows it where the release was), else its file name; never one another asset has."""
    stem = re.sub(r"\W", "_", problem.path.stem) or "spec"
    numbered = (f"{stem}_spec_{n}" for n in itertools.count(2))
    candidates = itertools.chain([problem.name, stem, f"{stem}_spec"], numbered)
    return next(c for c in candidates if c and c not in taken)


defs = build_definitions()
