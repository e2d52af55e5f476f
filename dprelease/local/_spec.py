"""A local spec file: the wave (one question asked under local DP) and the table released from it.

    wave:                          # what respondents' devices do; recorded in the ledger
      id: drug-use-2025-05         # one canonical spelling: lower case, digits, '.', '_', '-'
      question: drug_use           # the column the randomized answers arrive in
      domain: [never, once, monthly, weekly]
      epsilon: 1                   # ε of each respondent's answer (exact: 0.5, 1/3)
      mechanism: krr               # optional: krr, oue or olh (default: the rule's choice)
      scope: survey_respondents    # the budget scope of the people asked
    release:                       # optional: a table of the wave's randomized answers
      name: drug_use_by_region
      source: drug_use_answers
      group_by: [{column: region, domain: {values: [N, S, E, W]}}]
      public_columns: [region]     # the local mechanism does not protect these: say they are public

Everything here is public: the wave's parameters are in every respondent's questionnaire.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator

from dprelease.errors import ConfigError, SpecError
from dprelease.files import ReadableErrors, error_at_path, join_path, read_sections
from dprelease.loss import exact_positive
from dprelease.mechanism.randomized import (
    MAX_DOMAIN,
    PRIME,
    RANDOMIZER_VERSION,
    Mechanism,
    Randomizer,
    make_randomizer,
)
from dprelease.spec import NAME_PATTERN, GroupBy

#: A wave's id: its one spelling (lower case), so a wave is never recorded twice under two names.
WAVE_ID_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,99}$"
#: The ledger slot of a wave is `wave:<id>`: no release spec's name contains ':', so a wave's
#: charge never shares a slot with a central release.
WAVE_PREFIX = "wave:"


class _Strict(ReadableErrors):
    model_config = ConfigDict(extra="forbid", frozen=True)


class WaveSpec(_Strict):
    """`wave:`: one question asked under local DP, as the questionnaire randomizes it."""

    id: Annotated[str, Field(pattern=WAVE_ID_PATTERN)]
    question: Annotated[str, Field(pattern=NAME_PATTERN)]
    domain: list[str] | list[int] | list[bool] = Field(
        description="every answer the question allows, in order (public)"
    )
    epsilon: Fraction = Field(description="ε of each respondent's answer, exact")
    mechanism: Mechanism | None = Field(
        default=None,
        description="krr, oue or olh; default: k-RR when k < 3e^ε + 2, else OUE (OLH if compact)",
    )
    compact: bool = Field(
        default=False, description="prefer OLH to OUE (reports of a few dozen bits, not k)"
    )
    g: Annotated[int, Field(ge=2, lt=PRIME)] | None = Field(
        default=None, description="OLH's buckets (default round(e^ε) + 1)"
    )
    scope: Annotated[str, Field(min_length=1)] = Field(
        description="the budget scope of the people asked; each wave is charged its ε there"
    )

    @field_validator("epsilon", mode="before")
    @classmethod
    def _exact(cls, value: Any) -> Fraction:
        try:
            return exact_positive(value)
        except ValueError as exc:
            raise ValueError(f"ε {exc}") from None

    @field_validator("domain")
    @classmethod
    def _answers(cls, values: list[Any]) -> list[Any]:
        if not 2 <= len(values) <= MAX_DOMAIN:
            raise ValueError(f"a question needs 2 to {MAX_DOMAIN} answers")
        if len(set(values)) != len(values):
            raise ValueError("an answer is listed twice")
        return values

    @model_validator(mode="after")
    def _buckets(self) -> WaveSpec:
        if self.g is not None and self.mechanism != "olh":
            raise SpecError("g", "g is the number of OLH's buckets: set mechanism: olh or drop g")
        return self


class LocalReleaseSpec(_Strict):
    """`release:`: a table of the wave's randomized answers, per cell of public keys."""

    name: Annotated[str, Field(pattern=NAME_PATTERN)]
    source: str = Field(description="the table of randomized answers (a confidential store name)")
    group_by: list[GroupBy] = Field(default_factory=list)
    margins: list[list[str]] | None = None
    public_columns: list[str] = Field(
        default_factory=list,
        description="the group-by columns, listed to state that they are public: the local "
        "mechanism protects only the answer, and each cell's respondents are published exactly",
    )
    project: bool = Field(
        default=True,
        description="project each cell's counts onto nonnegative counts that sum to its "
        "respondents (post-processing; margins widen by the shift)",
    )
    shares: bool = Field(default=True, description="also publish each answer's share of the cell")
    hash_column: Annotated[str, Field(pattern=NAME_PATTERN)] = Field(
        default="wave_hash",
        description="the column each report's wave_hash arrives in (the page posts the "
        "configuration's with every report); a report under another configuration refuses "
        "the release",
    )
    engine: Literal["polars", "spark"] | None = None

    @field_validator("margins")
    @classmethod
    def _no_margins_is_none(cls, margins: list[list[str]] | None) -> list[list[str]] | None:
        return margins or None

    @property
    def key_columns(self) -> list[str]:
        return [column for group in self.group_by for column in group.key_columns]

    @model_validator(mode="after")
    def _public(self) -> LocalReleaseSpec:
        keys = self.key_columns
        missing = [column for column in keys if column not in self.public_columns]
        if missing:
            raise SpecError(
                "public_columns",
                f"group-by column {missing[0]!r} is not listed: the local mechanism protects only "
                "the randomized answer, so the grouping columns and each cell's respondents are "
                f"published as they are; list {missing[0]!r} here if it is public (not "
                "sensitive), or do not group by it",
            )
        extra = [column for column in self.public_columns if column not in keys]
        if extra:
            raise SpecError("public_columns", f"{extra[0]!r} is not a group-by column")
        return self


@dataclass(frozen=True, eq=False)
class Wave:
    """A wave with its randomizer resolved (the protocol the rule chose, OLH's g), and the hash
    the ledger keeps with its charge."""

    spec: WaveSpec
    randomizer: Randomizer

    @property
    def id(self) -> str:
        return self.spec.id

    @property
    def release_id(self) -> str:
        """The wave's ledger slot."""
        return f"{WAVE_PREFIX}{self.spec.id}/-"

    def declaration(self) -> dict[str, Any]:
        """What the wave asks of every device, as the ledger stores it and manifests state it."""
        return {
            "format": "dprelease-local-wave/1",
            "wave": self.spec.id,
            "question": self.spec.question,
            "domain": list(self.randomizer.domain),
            "mechanism": self.randomizer.mechanism,
            "epsilon": float(self.randomizer.epsilon),
            "epsilon_exact": str(self.randomizer.epsilon),
            "g": self.randomizer.g,
            "randomizer_version": RANDOMIZER_VERSION,
            "scope": self.spec.scope,
            "wave_hash": self.hash,
        }

    def config(self) -> dict[str, object]:
        """The questionnaire's configuration (`Randomizer.config`, with the wave's id and
        question), sealed by its `wave_hash`: `dprelease local wave` prints it for the page."""
        return self.randomizer.config(wave=self.spec.id, question=self.spec.question)

    @cached_property
    def hash(self) -> str:
        """Identity of the wave: the seal of its questionnaire configuration (everything a
        device does, not the scope, which the ledger keeps with the charge). The ledger keeps
        it with the charge; every report carries it back."""
        return str(self.config()["wave_hash"])


def resolve_wave(spec: WaveSpec) -> Wave:
    """The wave with its randomizer (`make_randomizer`)."""
    randomizer = make_randomizer(
        spec.domain, spec.epsilon, spec.mechanism, g=spec.g, compact=spec.compact
    )
    return Wave(spec, randomizer)


@dataclass(frozen=True, eq=False)
class LocalSpec:
    """A local spec file: its wave and, if it has one, its release; `base` is where keys files
    are read from."""

    wave: Wave
    release: LocalReleaseSpec | None
    base: Path | None = None

    def required_release(self) -> LocalReleaseSpec:
        if self.release is None:
            raise SpecError("release", "this local spec has no `release:` section to release")
        return self.release


def parse_local_spec(data: Any, *, base: Path | None = None, prefix: str = "") -> LocalSpec:
    """A local spec from a mapping with `wave:` (and optionally `release:`); SpecError at the
    YAML path of the first problem."""
    if not isinstance(data, dict) or "wave" not in data:
        raise SpecError(prefix + "wave", "a local spec needs a `wave:` section")
    unknown = sorted(set(data) - {"wave", "release"})
    if unknown:
        raise SpecError(prefix + unknown[0], "a local spec has only `wave:` and `release:`")
    try:
        wave = WaveSpec.model_validate(data["wave"])
    except ValidationError as exc:
        raise error_at_path(exc, prefix + "wave", SpecError) from None
    release = None
    if data.get("release") is not None:
        try:
            release = LocalReleaseSpec.model_validate(data["release"])
        except ValidationError as exc:
            raise error_at_path(exc, prefix + "release", SpecError) from None
    try:
        resolved = resolve_wave(wave)
    except ConfigError as exc:
        raise SpecError(join_path(prefix + "wave", exc.path), exc.message) from None
    return LocalSpec(resolved, release, base)


def load_local_spec(path: str | Path) -> LocalSpec:
    """Read a local spec file (`wave:`, and `release:` if it has one)."""
    path = Path(path)
    document = read_sections(path, ["wave"], SpecError, "local spec file")
    return parse_local_spec(document, base=path.parent)
