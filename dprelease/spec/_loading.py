"""Reading specs: a YAML file or a mapping in, a resolved spec out, every error at its YAML path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from dprelease.errors import SpecError
from dprelease.files import Location, error_at_path, read_sections
from dprelease.spec._domains import FileDomain, read_domain
from dprelease.spec._kinds import STATISTIC_KINDS
from dprelease.spec._levels import Levels
from dprelease.spec._local import local_path, local_release
from dprelease.spec._model import ReleaseSpec
from dprelease.spec._publication import read_standard_errors
from dprelease.spec._publish import PublishSpec
from dprelease.spec._resolved import ResolvedSpec


def _is_tag(loc: Location, index: int) -> bool:
    """Whether loc[index] is the tag pydantic adds for a union member (a domain's form, a
    statistic's kind), which is not part of the YAML path."""
    part = loc[index]
    if index >= 1 and loc[index - 1] == "domain":
        return part in {"values", "range", "file", "select"}
    return index >= 2 and loc[index - 2] == "statistics" and part in STATISTIC_KINDS


def parse_spec(data: Any, *, base_dir: Path | None = None, prefix: str = "release") -> ResolvedSpec:
    """Validate a `release:` mapping and resolve it; errors name the YAML path under `prefix`.

    `base_dir` is where `file:` domains are read from (default: the working directory).
    """
    try:
        spec = ReleaseSpec.model_validate(data)
    except ValidationError as exc:
        raise error_at_path(exc, prefix, SpecError, _is_tag) from None
    for group in spec.group_by:
        if isinstance(group.domain, FileDomain):
            group.domain._base_dir = base_dir
    for sampling in (spec.sampling or {}).values():
        if sampling.standard_errors is not None:
            sampling.standard_errors._base_dir = base_dir
    return resolve(spec, prefix=prefix)


def resolve(
    spec: ReleaseSpec,
    *,
    prefix: str = "release",
    publish: PublishSpec | None = None,
    path: Path | None = None,
) -> ResolvedSpec:
    """The spec with its public key domains read (keys files relative to the spec's YAML file,
    else the working directory) and its levels built; SpecError naming the YAML path of a bad
    domain or margin."""
    domains = tuple(
        read_domain(group, f"{prefix}.group_by[{i}].domain")
        for i, group in enumerate(spec.group_by)
    )
    resolved = ResolvedSpec(spec, domains, publish=publish, path=path)
    if spec.margins:
        try:
            levels = Levels.build(resolved.key_grid, spec.margins)
        except ValueError as exc:
            raise SpecError(f"{prefix}.margins", str(exc)) from None
        resolved = ResolvedSpec(spec, domains, levels, publish, path)
    if not spec.sampling:
        return resolved
    published = read_standard_errors(spec, resolved.released_keys, prefix)
    return ResolvedSpec(spec, domains, resolved.levels, publish, path, published)


def parse_local(
    document: dict[str, Any],
    *,
    base_dir: Path | None = None,
    path: Path | None = None,
    prefix: str = "",
) -> ResolvedSpec:
    """A local spec file's (or mapping's) `release:` as the central spec of its wave's answers
    (`_local`), in the wave's scope; errors name the YAML path the user wrote (the wave's fields
    at `wave.…`, the release's at `release.…`)."""
    if "release" not in document:
        raise SpecError(f"{prefix}release", "a local spec file needs a `release:` to release")
    release, publish = local_release(
        document["wave"], document["release"], document.get("publish"), prefix
    )
    try:
        resolved = parse_spec(release, base_dir=base_dir, prefix=f"{prefix}release")
    except SpecError as exc:
        raise SpecError(local_path(exc.path, prefix), exc.message) from None
    stated = _publish_section(publish, f"{prefix}publish")
    return ResolvedSpec(
        resolved.spec,
        resolved.domains,
        resolved.levels,
        stated,
        path,
        resolved.standard_errors,
        local=True,
    )


def _publish_section(data: Any, prefix: str) -> PublishSpec:
    try:
        return PublishSpec.model_validate(data)
    except ValidationError as exc:
        raise error_at_path(exc, prefix, SpecError) from None


def load_spec(path: str | Path, *, require_publish: bool = False) -> ResolvedSpec:
    """Read a spec file — `release:`, and optionally `publish:` (the budget a release draws on) —
    and resolve it (a local spec file's `release:` is its wave's answers: `_local`). With
    `require_publish` (the pipeline's spec files) the `publish:` section
    must be there, and errors name the file."""
    path = Path(path)
    sections = ["release", "publish"] if require_publish else ["release"]
    what = "pipeline spec" if require_publish else "spec file"
    document = read_sections(path, sections, SpecError, what)
    prefix = f"{path.name}: " if require_publish else ""
    if "wave" in document:  # a local spec file: its release is the wave's answers
        return parse_local(document, base_dir=path.parent, path=path, prefix=prefix)
    resolved = parse_spec(document["release"], base_dir=path.parent, prefix=f"{prefix}release")
    publish = None
    if document.get("publish") is not None:
        publish = _publish_section(document["publish"], f"{prefix}publish")
    elif require_publish:  # `publish:` with nothing under it
        raise SpecError(
            f"{prefix}publish",
            "is empty: give the scope its release draws on and the share of its cap one release "
            "spends (scope: …, share: 1/12)",
        )
    return ResolvedSpec(
        resolved.spec, resolved.domains, resolved.levels, publish, path, resolved.standard_errors
    )
