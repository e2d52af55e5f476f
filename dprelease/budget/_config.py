"""The YAML `privacy:` section: pydantic models, a loader, and the budget it implies.

    privacy:
      neighbours: add_remove            # or substitute
      profile: {kind: piecewise_linear, points: [[0, 10], [1, 2], [10, 5]]}
      # profiles: [...]                 # instead of `profile`: individual-specific profiles,
      #                                 # the release uses the smallest ε over all of them
      adversaries:
        - {name: prevalence, q: 0.5, q0: 0.00125}
      rounding: 0.05                    # optional: round ε_min (zcdp: ρ_max) down to this grid
      prior_risk: {kind: constant, r: 3}  # optional companion selector: ε ≤ its ε too
      measure: pure                     # or zcdp, with delta: 1e-9 (docs/privacy.md)
    scopes:                             # optional: a budget scope with its own profile
      hospital_patients:                # (a whole section like `privacy:`, not merged with it)
        profile: {kind: constant, bound: 20}

Scopes not listed under `scopes:` use `privacy:`. Every error becomes a `ConfigError` whose path
is the YAML path of the bad field, e.g. `privacy.adversaries[0].q` or
`scopes.hospital_patients.profile.points[2]`. The library types do the semantic
checks (B ≥ 1, sorted points, q in (0, 1)) so the rules live in one place.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    FiniteFloat,
    PrivateAttr,
    ValidationError,
    model_validator,
)

from dprelease.budget import _prior_risk as prior_risk
from dprelease.budget._choice import Adversary, BudgetChoice, choose_budget_for
from dprelease.budget._profiles import (
    ConstantProfile,
    OddsRiskProfile,
    PiecewiseLinearProfile,
    StepProfile,
)
from dprelease.change import ProtectedChange, central_change
from dprelease.errors import ConfigError
from dprelease.files import Location, error_at_path, join_path, read_sections
from dprelease.loss import Measure

_STRICT = ConfigDict(extra="forbid", frozen=True)
# Discriminated unions put the chosen `kind` into error locations; YAML paths must not show it.
_UNION_TAGS = frozenset({"piecewise_linear", "step", "constant", "max_fixed_q", "max_fixed_p"})


class _Section(BaseModel, ABC):
    """A YAML section that builds a library object; building it runs the semantic checks."""

    model_config = _STRICT

    @abstractmethod
    def build(self) -> Any:
        """The library object this section describes (raises on semantic errors)."""

    @model_validator(mode="after")
    def _check_by_building(self) -> Self:
        self.build()
        return self


class PiecewiseLinearSection(_Section):
    kind: Literal["piecewise_linear"]
    points: list[tuple[FiniteFloat, FiniteFloat]]

    def build(self) -> OddsRiskProfile:
        return PiecewiseLinearProfile(self.points)


class StepSection(_Section):
    kind: Literal["step"]
    points: list[tuple[FiniteFloat, FiniteFloat]]

    def build(self) -> OddsRiskProfile:
        return StepProfile(self.points)


class ConstantSection(_Section):
    kind: Literal["constant"]
    bound: FiniteFloat

    def build(self) -> OddsRiskProfile:
        return ConstantProfile(self.bound)


ProfileSection = Annotated[
    PiecewiseLinearSection | StepSection | ConstantSection, Field(discriminator="kind")
]


class AdversarySection(_Section):
    name: str = Field(min_length=1)
    q: float
    q0: float

    def build(self) -> Adversary:
        return Adversary(self.name, self.q, self.q0)


class ConstantRiskSection(_Section):
    kind: Literal["constant"]
    r: float

    def build(self) -> prior_risk.RelativeRiskProfile:
        return prior_risk.ConstantRelativeRisk(self.r)


class FloorRiskFixedQSection(_Section):
    kind: Literal["max_fixed_q"]
    a: float
    r: float
    q: float

    def build(self) -> prior_risk.RelativeRiskProfile:
        return prior_risk.FloorRelativeRiskFixedQ(self.a, self.r, self.q)


class FloorRiskFixedPSection(_Section):
    kind: Literal["max_fixed_p"]
    a: float
    r: float
    p: float

    def build(self) -> prior_risk.RelativeRiskProfile:
        return prior_risk.FloorRelativeRiskFixedP(self.a, self.r, self.p)


PriorRiskSection = Annotated[
    ConstantRiskSection | FloorRiskFixedQSection | FloorRiskFixedPSection,
    Field(discriminator="kind"),
]


class PrivacyConfig(BaseModel):
    """The validated `privacy:` section. Give exactly one of `profile` and `profiles`."""

    model_config = _STRICT
    neighbours: Annotated[ProtectedChange, BeforeValidator(central_change)] = (
        ProtectedChange.ADD_REMOVE
    )
    profile: ProfileSection | None = None
    profiles: list[ProfileSection] | None = Field(default=None, min_length=1)
    adversaries: list[AdversarySection] = Field(default_factory=list)
    rounding: Annotated[FiniteFloat, Field(gt=0)] | None = None
    prior_risk: PriorRiskSection | None = None
    measure: Measure = Field(
        default=Measure.PURE,
        description="pure: ε-DP, Laplace noise, the odds statement always holds; zcdp: ρ-zCDP, "
        "Gaussian noise (many statistics cost less), the statement holds with probability ≥ 1 − δ",
    )
    delta: float | None = Field(
        default=None, description="zcdp: the probability that the odds statement may fail"
    )
    selection_delta: Annotated[FiniteFloat, Field(gt=0, lt=0.5)] | None = Field(
        default=None,
        description="the scope's δ budget for key selection (select: true), kept for life; a "
        "budget of its own, not the δ above (docs/selection.md)",
    )
    _origin: str = PrivateAttr(default="privacy")

    @model_validator(mode="after")
    def _one_profile_form(self) -> Self:
        if (self.profile is None) == (self.profiles is None):
            raise ConfigError(
                "profile",
                "give exactly one of `profile` (one profile for everyone) or `profiles` "
                "(a list of individual-specific profiles)",
            )
        return self

    @classmethod
    def from_mapping(cls, data: Any, *, path_prefix: str = "privacy") -> PrivacyConfig:
        """Validate the section's contents; errors carry YAML paths under `path_prefix`."""
        if not isinstance(data, Mapping):
            raise ConfigError(path_prefix, f"expected a mapping, got {type(data).__name__}")
        try:
            config = cls.model_validate(data)
        except ValidationError as exc:
            raise error_at_path(exc, path_prefix, ConfigError, _is_union_tag) from None
        config._origin = path_prefix
        return config

    def odds_profiles(self) -> list[OddsRiskProfile]:
        sections = [self.profile] if self.profile is not None else list(self.profiles or [])
        return [section.build() for section in sections]


def _is_union_tag(loc: Location, index: int) -> bool:
    return loc[index] in _UNION_TAGS


@dataclass(frozen=True)
class PrivacyProfiles:
    """Every profile of a privacy YAML: the `privacy:` default and one per listed scope."""

    default: PrivacyConfig
    scopes: Mapping[str, PrivacyConfig]

    def for_scope(self, scope: str | None) -> PrivacyConfig:
        """The scope's own profile if it has one, else the default. A scope whose name differs
        from a listed one only in letter case is refused (the ledger keeps such names apart
        too), so a typo never takes the default profile's budget for a scope that has its own."""
        if scope is None:
            return self.default
        if scope in self.scopes:
            return self.scopes[scope]
        alike = next((name for name in self.scopes if name.casefold() == scope.casefold()), None)
        if alike is not None:
            raise ConfigError(
                "scopes",
                f"scope {scope!r} is not listed, {alike!r} is: the names differ only in letter "
                f"case; use {alike!r}, or list {scope!r} under scopes:",
            )
        return self.default


def load_privacy_profiles(path: str | Path) -> PrivacyProfiles:
    """Read and validate the whole file, every scope's section included, so a bad section fails
    before any release of any scope is charged."""
    file = Path(path)
    document = read_sections(file, ["privacy"], ConfigError, "privacy config")
    default = PrivacyConfig.from_mapping(document["privacy"], path_prefix="privacy")
    listed = document.get("scopes") or {}
    if not isinstance(listed, Mapping):
        raise ConfigError("scopes", f"expected a mapping of scope name to section in {file}")
    folded: dict[str, str] = {}
    for name in map(str, listed):
        other = folded.setdefault(name.casefold(), name)
        if other != name:  # the ledger keeps such names apart: one budget, one spelling
            raise ConfigError(
                "scopes",
                f"{other!r} and {name!r} differ only in letter case in {file}; a scope is one "
                "budget: list it once, under one spelling",
            )
    scopes = {
        str(name): PrivacyConfig.from_mapping(section, path_prefix=f"scopes.{name}")
        for name, section in listed.items()
    }
    return PrivacyProfiles(default, scopes)


def load_privacy_config(path: str | Path, scope: str | None = None) -> PrivacyConfig:
    """The profile of `scope` (its `scopes:` entry, else `privacy:`); no scope: `privacy:`."""
    return load_privacy_profiles(path).for_scope(scope)


def choose_budget(config: PrivacyConfig) -> BudgetChoice:
    """ε for a release from a validated config, with the adversary and group-privacy tables."""
    companion = config.prior_risk.build().epsilon().epsilon if config.prior_risk else None
    try:
        return choose_budget_for(
            config.odds_profiles(),
            neighbours=config.neighbours,
            adversaries=[section.build() for section in config.adversaries],
            rounding=config.rounding,
            prior_risk_epsilon=companion,
            measure=config.measure,
            delta=config.delta,
        )
    except ConfigError as exc:
        raise type(exc)(join_path(config._origin, exc.path), exc.message) from None
