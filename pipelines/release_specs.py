"""The pipeline's spec files: a library spec file (`release:`) with its `publish:` section.

`publish:` says which budget scope a release draws from, what share of the scope's cap one
release (one period) spends, and which reporting periods exist (`dprelease.spec.PublishSpec`;
the library reads it the same way, so `dprelease plan` and `dprelease release` agree with the
pipeline). Adding a YAML file to the specs directory (`DPRELEASE_SPECS_DIR`; the demo's are
bundled in `pipelines/specs/`) adds a release asset; no Python is written.

The files are read by the library's `load_pipeline_specs`, each on its own: a file that does not
load is a problem of its own (shown in the UI as a release that fails with that one line), never
a code location that fails to load.
"""

from __future__ import annotations

from pathlib import Path

from dprelease.errors import SpecError
from dprelease.spec import PublishSpec, ResolvedSpec, SpecCatalog, load_pipeline_specs

#: The demo's spec files, bundled with the package: the releases `python3 dev.py demo` runs.
SPECS_DIR = Path(__file__).resolve().parent / "specs"


def publish_of(release: ResolvedSpec) -> PublishSpec:
    """The `publish:` section every pipeline spec has (`load_pipeline_spec` requires it)."""
    assert release.publish is not None, "load_pipeline_spec requires a publish: section"
    return release.publish


def load_catalog(directory: Path = SPECS_DIR) -> SpecCatalog:
    """Every `*.yaml` spec in `directory`, sorted by file name: the releases that load, and a
    problem (one line naming the file and field) for each file that does not."""
    return load_pipeline_specs([directory])


def load_releases(directory: Path = SPECS_DIR) -> list[ResolvedSpec]:
    """Every release of `directory`, or SpecError with the first problem: for callers that
    release all of them or none."""
    catalog = load_catalog(directory)
    if catalog.problems:
        raise SpecError("", catalog.problems[0].message)
    return list(catalog.releases)
