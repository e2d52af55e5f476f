"""The randomizers: what runs where the answer is given, so the agency never holds a true answer.

Three protocols of Wang, Blocki, Li & Jha (2017), "Locally differentially private protocols for
frequency estimation", each ε-locally differentially private (any two answers give any report
with probabilities within a factor e^ε), each sampled exactly (`_exact`):

* `krr`, k-ary randomized response: the answer, kept with probability e^ε/(e^ε + k − 1), else
  one of the other k − 1 answers uniformly. Report: an answer of the domain.
* `oue`, optimized unary encoding: one bit per answer of the domain; the answer's bit is 1 with
  probability 1/2, every other bit with probability 1/(1 + e^ε). Report: k characters 0/1.
* `olh`, optimized local hashing: a hash function h drawn for the respondent maps the answer to
  one of g = round(e^ε) + 1 buckets, reported by g-ary randomized response together with the
  hash's seeds. Report: "a:b:y" with h(x) = ((a·x + b) mod P) mod g, P = 2^31 − 1, x the
  answer's index, a uniform in [1, P), b uniform in [0, P) (Carter & Wegman's universal family:
  the pair (a·x + b, a·x' + b) mod P is uniform over distinct pairs for x ≠ x', so the chance
  that two answers collide is the same number for every pair, and the estimator uses it exactly).

The variance of a count estimated from n reports is about n·(e^ε + k − 2)/(e^ε − 1)² for k-RR
and n·4e^ε/(e^ε − 1)² for OUE and OLH, so k-RR is the better choice exactly when
k − 2 < 3e^ε, i.e. k < 3e^ε + 2 (`choose_mechanism`); OLH has OUE's variance with reports of
a few dozen bits instead of k, for when communication matters.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property
from typing import TYPE_CHECKING, Literal

from dprelease.errors import ConfigError
from dprelease.mechanism.randomized._exact import (
    ByteStream,
    bernoulli_one_over_one_plus_exp,
    byte_reader,
    keep_or_other,
    uniform,
)

if TYPE_CHECKING:
    from dprelease.mechanism.noise import NoiseSource

#: The randomizers' algorithm and report format; `randomize.js` states the same. A wave records
#: it, so a release knows how its reports were made.
RANDOMIZER_VERSION = "dprelease-local/1"
#: The modulus of the OLH hash family, a Mersenne prime above every domain size allowed.
PRIME = (1 << 31) - 1
#: The most answers a domain may have (OUE's reports hold one bit per answer).
MAX_DOMAIN = 1 << 16

Mechanism = Literal["krr", "oue", "olh"]
MECHANISMS: tuple[Mechanism, ...] = ("krr", "oue", "olh")
#: An answer of the domain: text, an integer or a boolean, as a spec lists it.
Answer = str | int | bool
Report = str | int | bool


def _typed(answer: object) -> tuple[str, Answer]:
    """An answer with its kind, so that True, 1 and "1" stay three answers (numpy's scalars
    are plain Python values here)."""
    item = getattr(answer, "item", None)
    value = item() if callable(item) else answer
    if isinstance(value, bool):
        return "bool", value
    if isinstance(value, int):
        return "int", value
    if isinstance(value, str):
        return "str", value
    raise ConfigError("values", f"answer {answer!r} is not text, an integer or a boolean")


def choose_mechanism(k: int, epsilon: Fraction, *, compact: bool = False) -> Mechanism:
    """The protocol with the smaller variance for k answers at ε: k-RR when k < 3e^ε + 2, else
    OUE, or OLH when `compact` (reports of O(log) bits, the same variance as OUE)."""
    if k - 2 < 3 * math.exp(epsilon):
        return "krr"
    return "olh" if compact else "oue"


def default_buckets(epsilon: Fraction) -> int:
    """OLH's g: e^ε + 1 minimizes its variance; g is an integer, round(e^ε) + 1 (at least 2)."""
    return max(2, round(math.exp(epsilon)) + 1)


def olh_hash(a: int, b: int, x: int, g: int) -> int:
    """The bucket of answer index x under the hash with seeds (a, b): ((a·x + b) mod P) mod g."""
    return ((a * x + b) % PRIME) % g


@dataclass(frozen=True)
class Randomizer:
    """One protocol at one ε over one public domain (in its order: an answer's index is its
    position). `randomize_one` takes one answer; `config` is what the JavaScript module needs."""

    mechanism: Mechanism
    epsilon: Fraction
    domain: tuple[Answer, ...]
    g: int | None = None  # OLH's buckets

    def __post_init__(self) -> None:
        if self.mechanism not in MECHANISMS:
            raise ConfigError("mechanism", f"must be one of {', '.join(MECHANISMS)}")
        if not isinstance(self.epsilon, Fraction) or self.epsilon <= 0:
            raise ConfigError("epsilon", "must be an exact rational > 0 (a Fraction)")
        if not 2 <= len(self.domain) <= MAX_DOMAIN:
            raise ConfigError("domain", f"a question needs 2 to {MAX_DOMAIN} answers")
        if len({_typed(answer) for answer in self.domain}) != len(self.domain):
            raise ConfigError("domain", "an answer is listed twice")
        if (self.mechanism == "olh") != (self.g is not None):
            raise ConfigError("g", "the number of buckets is given for olh, and only for olh")
        if self.g is not None and not 2 <= self.g < PRIME:
            raise ConfigError("g", f"must be at least 2 and below {PRIME}")

    @property
    def k(self) -> int:
        return len(self.domain)

    @cached_property
    def _positions(self) -> dict[tuple[str, Answer], int]:
        return {_typed(value): position for position, value in enumerate(self.domain)}

    def index(self, answer: Answer) -> int:
        """The answer's position in the domain; ConfigError for an answer outside it (1 is not
        the answer True, nor "1" the answer 1)."""
        position = self._positions.get(_typed(answer))
        if position is None:
            raise ConfigError("values", f"answer {answer!r} is not in the domain")
        return position

    def randomize_one(self, answer: Answer, stream: ByteStream) -> Report:
        """The report of one answer, drawn from `stream` (see the module docstring)."""
        value = self.index(answer)
        if self.mechanism == "krr":
            return self.domain[keep_or_other(stream, value, self.k, self.epsilon)]
        if self.mechanism == "oue":
            return "".join(
                str(uniform(stream, 2))
                if j == value
                else "1"
                if bernoulli_one_over_one_plus_exp(stream, self.epsilon)
                else "0"
                for j in range(self.k)
            )
        assert self.g is not None
        a = 1 + uniform(stream, PRIME - 1)
        b = uniform(stream, PRIME)
        bucket = keep_or_other(stream, olh_hash(a, b, value, self.g), self.g, self.epsilon)
        return f"{a}:{b}:{bucket}"

    def randomize(
        self, answer: Answer, *, source: NoiseSource | None = None, allow_unsafe_noise: bool = False
    ) -> Report:
        """The report of one answer, from `source` (default: the OS CSPRNG; a seeded test
        source only with `allow_unsafe_noise`): what a respondent's device does."""
        reader = byte_reader(source, allow_unsafe_noise=allow_unsafe_noise)
        return self.randomize_one(answer, ByteStream(reader, block=64))

    def randomize_all(self, answers: Iterable[Answer | None], stream: ByteStream) -> list:
        """The reports of `answers` in order; a missing answer (None) stays missing."""
        return [None if a is None else self.randomize_one(a, stream) for a in answers]

    def config(self, **wave: str) -> dict[str, object]:
        """The JavaScript module's configuration: this randomizer, exactly (ε as a fraction),
        with the `wave` facts given (a wave's id and question), sealed by `wave_hash`."""
        out: dict[str, object] = {
            "version": RANDOMIZER_VERSION,
            "mechanism": self.mechanism,
            "epsilon": str(self.epsilon),
            "domain": list(self.domain),
            **wave,
        }
        if self.g is not None:
            out["g"] = self.g
        return {**out, "wave_hash": config_hash(out)}


def config_hash(config: dict[str, object]) -> str:
    """SHA-256 of the configuration's canonical JSON (keys sorted, no spaces, UTF-8), every key
    but `wave_hash`: what the module recomputes from the configuration a page gives it, and what
    each report carries back, so a page configured otherwise than the recorded wave (another ε,
    a stale snippet) is refused on the device, and its reports by the release."""
    facts = {key: value for key, value in config.items() if key != "wave_hash"}
    canonical = json.dumps(facts, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def make_randomizer(
    domain: Sequence[Answer],
    epsilon: Fraction,
    mechanism: Mechanism | None = None,
    *,
    g: int | None = None,
    compact: bool = False,
) -> Randomizer:
    """A randomizer over `domain` at ε: the protocol given, else the one `choose_mechanism`
    picks; OLH's g given, else `default_buckets`."""
    chosen = mechanism or choose_mechanism(len(domain), epsilon, compact=compact)
    if chosen == "olh" and g is None:
        if epsilon >= math.log(PRIME - 2):  # e^ε would overflow, or give g ≥ 2^31 − 1
            raise ConfigError(
                "g",
                "OLH's default round(e^ε) + 1 buckets reach 2^31 − 1 at this ε: give g "
                "(2 to 2^31 − 2) or a smaller ε",
            )
        g = default_buckets(epsilon)
    return Randomizer(chosen, epsilon, tuple(domain), g)
