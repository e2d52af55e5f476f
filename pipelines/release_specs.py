"""The pipeline's spec files: a library spec file (`release:`) with its `publish:` section.

`publish:` says which budget scope a release draws from, what share of the scope's cap one
release (one period) spends, and which reporting periods exist (`dprelease.spec.PublishSpec`;
the library reads it the same way, so `dprelease plan` and `dprelease release` agree with the
pipeline). Adding a YAML file to `pipelines/specs/` adds a release asset; no Python is written.
"""

from __future__ import annotations

from pathlib import Path

from dprelease.errors import SpecError
from dprelease.spec import PublishSpec, ResolvedSpec, load_spec

SPECS_DIR = Path(__file__).resolve().parent / "specs"


def publish_of(release: ResolvedSpec) -> PublishSpec:
    """The `publish:` section every pipeline spec has (`load_release` requires it)."""
    assert release.publish is not None, "load_release requires a publish: section"
    return release.publish


def load_release(path: Path) -> ResolvedSpec:
    """Validate one spec file; errors name the file and the YAML path."""
    release = load_spec(path, require_publish=True)
    spec, publish = release.spec, publish_of(release)
    if spec.name == spec.source:
        raise SpecError(
            f"{path.name}: release.name",
            f"the release is named like its source table {spec.source!r}; in the pipeline both "
            "are assets, so a release cannot read a table of its own name: rename the release "
            f"(e.g. {spec.source}_by_…)",
        )
    if spec.period is not None and publish.first_period is None:
        raise SpecError(
            f"{path.name}: publish.first_period",
            "a monthly release needs its first period (YYYY-MM); last_period is "
            "optional (open-ended)",
        )
    return release


def load_releases(directory: Path = SPECS_DIR) -> list[ResolvedSpec]:
    """Every `*.yaml` spec in `directory`, sorted by file name; release names must be unique,
    and no release may be named like a table another one reads."""
    releases = [load_release(path) for path in sorted(directory.glob("*.yaml"))]
    names = [r.spec.name for r in releases]
    sources = {r.spec.source for r in releases}
    for release in releases:
        name = release.spec.name
        where = release.path.name if release.path else str(directory)
        if names.count(name) > 1:
            raise SpecError(str(directory), f"two spec files release {name!r}")
        if name in sources:
            raise SpecError(
                f"{where}: release.name",
                f"{name!r} is also the source table of another spec; rename the release",
            )
    return releases
