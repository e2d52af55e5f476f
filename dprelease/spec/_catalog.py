"""A pipeline's spec files, each loaded on its own: one bad file is one problem, not a failed load.

A pipeline (the Dagster code location, `dprelease validate`) reads every spec file of a
directory. Each file is loaded and checked alone (`load_pipeline_spec`), then the files that
loaded are checked against each other (a release named twice, a release named like a table
another one reads). A file that fails becomes a `SpecProblem` that names it, and every other
file still loads: the code location shows the broken one as what it is and keeps the others
launchable, and `dprelease validate` lists every problem at once.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import yaml

from dprelease.errors import DPReleaseError, SpecError
from dprelease.spec._base import NAME_PATTERN
from dprelease.spec._loading import load_spec
from dprelease.spec._resolved import ResolvedSpec

#: The file names a directory of pipeline specs is read from.
SPEC_GLOB = "*.yaml"


@dataclass(frozen=True)
class SpecProblem:
    """A spec file that cannot be released, in one line that names the file and the field."""

    path: Path
    message: str
    #: The release name the file declares, when it can be read at all (a UI shows the broken
    #: release under the name it had while it worked).
    name: str | None = None

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class SpecCatalog:
    """The releases that loaded, and a problem for each file that did not."""

    releases: tuple[ResolvedSpec, ...]
    problems: tuple[SpecProblem, ...]


def load_pipeline_spec(path: Path) -> ResolvedSpec:
    """One pipeline spec file (`release:` and `publish:`), checked on its own; SpecError naming
    the file and the YAML path."""
    release = load_spec(path, require_publish=True)
    spec, publish = release.spec, release.publish
    if publish is None:  # load_spec refuses a missing or empty `publish:`; never read without
        raise SpecError(f"{path.name}: publish", "a pipeline spec needs its publish: section")
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


def spec_files(paths: Iterable[Path]) -> list[Path]:
    """The spec files `paths` name: a directory stands for its `*.yaml` files, sorted by name."""
    found: list[Path] = []
    for path in paths:
        found += sorted(path.glob(SPEC_GLOB)) if path.is_dir() else [path]
    return found


def load_pipeline_specs(paths: Iterable[Path]) -> SpecCatalog:
    """Every spec file of `paths` (directories and files), each on its own, then checked against
    the others: release names are unique, and no release is named like a table another reads.
    Every file involved in a clash is a problem (which of two should win is not ours to guess)."""
    loaded: list[ResolvedSpec] = []
    problems: list[SpecProblem] = []
    for path in spec_files(paths):
        try:
            loaded.append(load_pipeline_spec(path))
        except DPReleaseError as exc:
            problems.append(SpecProblem(path, str(exc), _declared_name(path)))
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            problems.append(SpecProblem(path, f"{path}: cannot read the spec file: {reason}"))
    clashes = _clashes(loaded)
    releases = tuple(r for r in loaded if _file(r) not in clashes)
    problems += [
        SpecProblem(r.path or Path(r.spec.name), clashes[_file(r)], r.spec.name)
        for r in loaded
        if _file(r) in clashes
    ]
    return SpecCatalog(releases, tuple(sorted(problems, key=lambda p: str(p.path))))


def _file(release: ResolvedSpec) -> str:
    return release.path.name if release.path else release.spec.name


def _clashes(releases: list[ResolvedSpec]) -> dict[str, str]:
    """File name → why it cannot be released beside the others."""
    by_name: dict[str, list[str]] = {}
    readers: dict[str, list[str]] = {}
    for release in releases:
        by_name.setdefault(release.spec.name, []).append(_file(release))
        readers.setdefault(release.spec.source, []).append(_file(release))
    clashes: dict[str, str] = {}
    for release in releases:
        name, file = release.spec.name, _file(release)
        others = [f for f in by_name[name] if f != file]
        if others:
            clashes[file] = (
                f"{file}: release.name: {name!r} is also released by {', '.join(others)}; "
                "each release needs a name of its own: rename one of them"
            )
        elif name in readers:
            clashes[file] = (
                f"{file}: release.name: {name!r} is the source table of "
                f"{', '.join(readers[name])}; in the pipeline both are assets: rename the release"
            )
    return clashes


def _declared_name(path: Path) -> str | None:
    """`release.name` of a file that did not load, if the file reads as YAML and gives one."""
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
        name = document["release"]["name"]
    except Exception:  # any unreadable file simply has no name to show
        return None
    return name if isinstance(name, str) and re.fullmatch(NAME_PATTERN, name) else None
