"""Checking a pipeline before it runs: every spec file and the privacy YAML, without data.

`dprelease validate` (in CI, before a code location is reloaded) asks whether any release of a
pipeline would be refused for its files alone. The checks are the release path's own, minus
what needs data or a ledger: each spec file loads on its own and beside the others
(`spec.load_pipeline_specs`), the privacy YAML loads whole, every scope's section included
(`budget.load_privacy_profiles`), each release's budget is decided against its scope's profile
as for a new scope (`decide_budget`) and planned (`plan_budget`: the allocation, Δ, the noise
scales), and the specs that draw on one scope compose their periods one way. Every problem is
collected, so one run lists them all, each in one line that names the file.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from dprelease.budget import PrivacyProfiles, load_privacy_profiles
from dprelease.errors import DPReleaseError
from dprelease.publish._budget import composition_of, decide_budget, plan_budget
from dprelease.spec import ResolvedSpec, load_pipeline_specs, spec_files

#: Where a deployment keeps its spec files and its privacy YAML: the code location reads them,
#: and `dprelease validate` checks them by default.
SPECS_DIR_ENV = "DPRELEASE_SPECS_DIR"
PRIVACY_CONFIG_ENV = "DPRELEASE_PRIVACY_CONFIG"


@dataclass(frozen=True)
class Validation:
    """What `validate_pipeline` found: the releases that passed every check, the budget scopes
    they draw on, and one line per problem."""

    files: int
    releases: tuple[ResolvedSpec, ...]
    scopes: tuple[str, ...]
    problems: tuple[str, ...]
    privacy_checked: bool

    @property
    def ok(self) -> bool:
        return not self.problems


def validate_pipeline(specs: Iterable[Path], privacy: Path | None = None) -> Validation:
    """Check the spec files `specs` names (directories stand for their `*.yaml` files) and, if
    given, the privacy YAML and each release's budget under it. Reads no data and no ledger."""
    specs = list(specs)
    files = spec_files(specs)
    catalog = load_pipeline_specs(specs)
    problems = [problem.message for problem in catalog.problems]
    if not files:
        problems.append(f"{', '.join(map(str, specs))}: no spec files (*.yaml) to check")
    releases = list(catalog.releases)
    profiles = None
    if privacy is not None:
        try:
            profiles = load_privacy_profiles(privacy)
        except DPReleaseError as exc:
            problems.append(_in_file(privacy, str(exc)))
    if profiles is not None:
        failed = {}
        for release in releases:
            if (problem := _budget_problem(release, profiles)) is not None:
                failed[_name(release)] = problem
        failed |= _mixed_compositions(releases)
        problems += failed.values()
        releases = [r for r in releases if _name(r) not in failed]
    scopes = sorted({r.publish.scope for r in releases if r.publish is not None})
    return Validation(
        files=len(files),
        releases=tuple(releases),
        scopes=tuple(scopes),
        problems=tuple(problems),
        privacy_checked=profiles is not None,
    )


def _name(release: ResolvedSpec) -> str:
    return release.path.name if release.path else release.spec.name


def _in_file(path: Path, message: str) -> str:
    """`message` naming `path` (the privacy YAML's own messages give YAML paths only)."""
    return message if str(path) in message or path.name in message else f"{path}: {message}"


def _budget_problem(release: ResolvedSpec, profiles: PrivacyProfiles) -> str | None:
    """Why a first release of this spec, into a new scope of its profile, would be refused."""
    try:
        budget = decide_budget(release, privacy=profiles, new_ledger=True)
        plan_budget(release, budget)
    except DPReleaseError as exc:
        return _in_file(Path(_name(release)), str(exc))
    return None


def _mixed_compositions(releases: list[ResolvedSpec]) -> dict[str, str]:
    """A scope composes its periods one way (the ledger keeps it for life): every spec of a
    scope whose specs disagree is a problem."""
    by_scope: dict[str, list[ResolvedSpec]] = {}
    for release in releases:
        if release.publish is not None:
            by_scope.setdefault(release.publish.scope, []).append(release)
    problems = {}
    for scope, drawing in by_scope.items():
        ways = {composition_of(r) for r in drawing}
        if len(ways) < 2:
            continue
        said = ", ".join(f"{_name(r)} {composition_of(r)}" for r in drawing)
        for release in drawing:
            problems[_name(release)] = (
                f"{_name(release)}: release.period.composition: the specs of scope {scope!r} "
                f"compose its periods differently ({said}); a scope composes one way for life"
            )
    return problems
