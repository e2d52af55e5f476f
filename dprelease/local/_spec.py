"""A local spec file: the wave (one question asked under local DP) and the table released from it
(`release:`, a central release spec of the wave's answers: `spec._local`).

    wave:                          # what respondents' devices do; recorded in the ledger
      id: drug-use-2025-05         # one canonical spelling: lower case, digits, '.', '_', '-'
      question: drug_use           # the column the randomized answers arrive in
      domain: [never, once, monthly, weekly]
      epsilon: 1                   # ε of each respondent's answer (exact: 0.5, 1/3)
      mechanism: krr               # optional: krr, oue or olh (default: the rule's choice)
      scope: survey_respondents    # the budget scope of the people asked
    release:                       # a table of the wave's randomized answers
      name: drug_use_by_region
      source: drug_use_answers
      group_by: [{column: region, domain: {values: [N, S, E, W]}}]
      public_columns: [region]     # the local mechanism does not protect these: say they are public

Everything here is public: the wave's parameters are in every respondent's questionnaire.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any

from pydantic import ConfigDict, Field, ValidationError, model_validator

from dprelease.errors import ConfigError, SpecError
from dprelease.files import ReadableErrors, error_at_path, join_path, read_sections
from dprelease.mechanism.kinds import wave_slot
from dprelease.mechanism.randomized import (
    PRIME,
    RANDOMIZER_VERSION,
    Mechanism,
    Randomizer,
    make_randomizer,
)
from dprelease.spec import (
    NAME_PATTERN,
    WAVE_ID_PATTERN,
    AnswerEpsilon,
    Answers,
    check_buckets,
)


class _Strict(ReadableErrors):
    model_config = ConfigDict(extra="forbid", frozen=True)


class WaveSpec(_Strict):
    """`wave:`: one question asked under local DP, as the questionnaire randomizes it."""

    id: Annotated[str, Field(pattern=WAVE_ID_PATTERN)]
    question: Annotated[str, Field(pattern=NAME_PATTERN)]
    domain: Answers = Field(description="every answer the question allows, in order (public)")
    epsilon: AnswerEpsilon = Field(description="ε of each respondent's answer, exact")
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

    @model_validator(mode="after")
    def _buckets(self) -> WaveSpec:
        check_buckets(self.g, self.mechanism)
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
        return wave_slot(self.spec.id)

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
    """A local spec file's wave; `path` is the file (its `release:` is read as a central spec's
    by `spec.load_spec`, `dp.release` and `dprelease release`)."""

    wave: Wave
    path: Path | None = None


def parse_local_spec(data: Any, *, path: Path | None = None, prefix: str = "") -> LocalSpec:
    """A local spec's wave from a mapping with `wave:` (its `release:` and `publish:` are the
    central spec's, checked when it is released); SpecError at the YAML path of the first
    problem."""
    if not isinstance(data, dict) or "wave" not in data:
        raise SpecError(prefix + "wave", "a local spec needs a `wave:` section")
    unknown = sorted(set(data) - {"wave", "release", "publish"})
    if unknown:
        raise SpecError(
            prefix + unknown[0], "a local spec has only `wave:`, `release:` and `publish:`"
        )
    try:
        wave = WaveSpec.model_validate(data["wave"])
    except ValidationError as exc:
        raise error_at_path(exc, prefix + "wave", SpecError) from None
    try:
        resolved = resolve_wave(wave)
    except ConfigError as exc:
        raise SpecError(join_path(prefix + "wave", exc.path), exc.message) from None
    return LocalSpec(resolved, path)


def load_local_spec(path: str | Path) -> LocalSpec:
    """Read a local spec file's wave."""
    path = Path(path)
    document = read_sections(path, ["wave"], SpecError, "local spec file")
    return parse_local_spec(document, path=path)
