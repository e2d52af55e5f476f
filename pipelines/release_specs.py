"""Release spec files for the pipeline: the library's `release:` section plus a `publish:` section.

`publish:` says which budget scope a release draws from, what share of the scope's cap one
release (one period) spends, and which reporting periods exist. Adding a YAML file to
`pipelines/specs/` adds a release asset; no Python is written.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from dprelease.errors import SpecError
from dprelease.ledger import Composition
from dprelease.spec import LoadedSpec, parse_spec
from dprelease.yaml_files import error_at_path, read_sections

SPECS_DIR = Path(__file__).resolve().parent / "specs"
_MONTH = r"^\d{4}-(0[1-9]|1[0-2])$"


class PublishSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    scope: Annotated[str, Field(min_length=1)]
    share: Fraction = Field(description="fraction of the scope's cap one release spends, e.g. 1/12")
    first_period: Annotated[str, Field(pattern=_MONTH)] | None = None
    last_period: Annotated[str, Field(pattern=_MONTH)] | None = None

    @field_validator("share", mode="before")
    @classmethod
    def _fraction(cls, value: object) -> Fraction:
        try:
            share = Fraction(str(value))
        except (ValueError, ZeroDivisionError):
            raise ValueError(f"share must be a fraction like 1/12 or 0.25, got {value!r}") from None
        if not 0 < share <= 1:
            raise ValueError(f"share must be in (0, 1], got {value!r}")
        return share


@dataclass(frozen=True)
class PipelineRelease:
    """One spec file: what to release and how it draws on the budget."""

    path: Path
    loaded: LoadedSpec
    publish: PublishSettings

    @property
    def name(self) -> str:
        return self.loaded.spec.name

    @property
    def composition(self) -> Composition:
        """How the scope composes periods: the spec's `period.composition`, else sequential."""
        period = self.loaded.spec.period
        return period.composition if period else "sequential"


def load_release(path: Path) -> PipelineRelease:
    """Validate one spec file; errors name the file and the YAML path."""
    document = read_sections(path, ["release", "publish"], SpecError, "pipeline spec")
    loaded = parse_spec(document["release"], base_dir=path.parent, prefix=f"{path.name}: release")
    try:
        publish = PublishSettings.model_validate(document["publish"])
    except ValidationError as exc:
        raise error_at_path(exc, f"{path.name}: publish", SpecError) from None
    period = loaded.spec.period
    if period is not None and publish.first_period is None:
        raise SpecError(
            f"{path.name}: publish.first_period",
            "a monthly release needs its first period (YYYY-MM); last_period is "
            "optional (open-ended)",
        )
    return PipelineRelease(path, loaded, publish)


def load_releases(directory: Path = SPECS_DIR) -> list[PipelineRelease]:
    """Every `*.yaml` spec in `directory`, sorted by file name; release names must be unique."""
    releases = [load_release(path) for path in sorted(directory.glob("*.yaml"))]
    names = [r.name for r in releases]
    for name in names:
        if names.count(name) > 1:
            raise SpecError(str(directory), f"two spec files release {name!r}")
    return releases
