"""The local-DP calls of the Python face (`dp.local....`): parse, call the one path, hand back.

reports = dp.local.randomize(answers, domain=[...], epsilon=1)      # on the device's side
dp.local.record_wave("drug_use.yaml", ledger=dp.Ledger("ledger.sqlite"), cap=2)
result = dp.release(answers_df, "drug_use.yaml", ledger="ledger.sqlite")  # the central path
dp.local.plan(respondents=10_000, categories=4, epsilon=1)          # local vs central
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dprelease.budget import PrivacyProfiles, load_privacy_profiles
from dprelease.errors import ConfigError, SpecError
from dprelease.local._adapter import NoiseSource, byte_reader
from dprelease.local._plan import LocalPlan, plan_local
from dprelease.local._spec import LocalSpec, load_local_spec, parse_local_spec
from dprelease.loss import Amount, exact_positive
from dprelease.mechanism.randomized import (
    Answer,
    ByteStream,
    Mechanism,
    Randomizer,
    Report,
    make_randomizer,
)

if TYPE_CHECKING:  # SQLAlchemy loads with the ledger: only waves and releases need it
    from dprelease.ledger import Ledger
    from dprelease.local._wave import RecordedWave

#: A local spec, the mapping of a local spec file (`wave:`, and its `release:`), or its path.
LocalSpecLike = LocalSpec | Mapping[str, Any] | str | Path

JS_MODULE = Path(__file__).with_name("randomize.js")


def js_module_path() -> Path:
    """The JavaScript randomizer (`randomize.js`) installed with the package, to serve with a
    web questionnaire."""
    return JS_MODULE


def _epsilon(value: Amount) -> Fraction:
    try:
        return exact_positive(value)
    except ValueError as exc:
        raise ConfigError("epsilon", f"ε {exc}") from None


def randomizer(
    domain: Sequence[Answer],
    epsilon: Amount,
    mechanism: Mechanism | None = None,
    *,
    g: int | None = None,
    compact: bool = False,
) -> Randomizer:
    """The randomizer of `domain` at ε: `mechanism` (krr, oue, olh), else the one with the
    smaller variance (k-RR when k < 3e^ε + 2, else OUE, or OLH when `compact`)."""
    return make_randomizer(list(domain), _epsilon(epsilon), mechanism, g=g, compact=compact)


def randomize(
    values: Iterable[Answer | None],
    *,
    domain: Sequence[Answer],
    epsilon: Amount,
    mechanism: Mechanism | None = None,
    g: int | None = None,
    compact: bool = False,
    source: NoiseSource | None = None,
    allow_unsafe_noise: bool = False,
) -> list[Report | None]:
    """Each answer's report (a missing answer stays None), drawn exactly from `source` (default:
    the OS CSPRNG; a seeded test source only with `allow_unsafe_noise`).

    Randomize where the answer is given: on the respondent's device (the JavaScript module does
    the same, byte for byte), or as the interviewer enters it; answers randomized after the
    agency has held them protect nothing against the agency. Also for simulations."""
    chosen = randomizer(domain, epsilon, mechanism, g=g, compact=compact)
    stream = ByteStream(byte_reader(source, allow_unsafe_noise=allow_unsafe_noise))
    return chosen.randomize_all((None if _missing(v) else v for v in values), stream)


def _missing(value: object) -> bool:
    """A missing answer as a column holds it: None, NaN (pandas' text and float columns), or
    pandas' NA and NaT, so a pandas Series randomizes as its answers, gaps kept."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return True
    return type(value).__name__ in ("NAType", "NaTType")


def load(spec: LocalSpecLike) -> LocalSpec:
    """A local spec from a path, a mapping as a file holds it, or as it is."""
    if isinstance(spec, LocalSpec):
        return spec
    if isinstance(spec, Mapping):
        return parse_local_spec(dict(spec))
    if isinstance(spec, str | Path):
        return load_local_spec(spec)
    raise SpecError(
        "spec", f"got a {type(spec).__name__}: give a local spec file's path or its mapping"
    )


@contextmanager
def _opened(ledger: Ledger | str | None) -> Iterator[Ledger | None]:
    """The caller's ledger, or an existing one by URL (never a new one: `dp.Ledger(url)`
    creates one), closed afterwards."""
    from dprelease.ledger import Ledger

    if ledger is None or isinstance(ledger, Ledger):
        yield ledger
        return
    with Ledger(ledger, mode="existing") as opened:
        yield opened


def record_wave(
    spec: LocalSpecLike,
    *,
    ledger: Ledger | str,
    cap: Amount | None = None,
    privacy: PrivacyProfiles | str | Path | None = None,
) -> RecordedWave:
    """Charge the wave's ε to its scope before its answers are collected (a new scope gets
    `cap`, else its privacy profile's cap); recording it again charges nothing."""
    from dprelease.local._wave import record_wave as _record

    loaded = load(spec)
    profiles = load_privacy_profiles(privacy) if isinstance(privacy, str | Path) else privacy
    stated = None if cap is None else _epsilon(cap)
    with _opened(ledger) as book:
        assert book is not None
        return _record(loaded.wave, book, cap=stated, privacy=profiles)


def plan(
    respondents: int,
    categories: int,
    epsilon: Amount,
    *,
    mechanism: Mechanism | None = None,
    compact: bool = False,
    target: float | None = None,
) -> LocalPlan:
    """The margin of a count and a share under local DP beside the central margin at the same
    ε, for `respondents` answering one of `categories` answers (no data read); with `target`
    (a share's margin, e.g. 0.02) also the respondents it needs."""
    if isinstance(respondents, bool) or not isinstance(respondents, int) or respondents < 1:
        raise ConfigError("respondents", f"must be a whole number ≥ 1, got {respondents!r}")
    if isinstance(categories, bool) or not isinstance(categories, int) or categories < 2:
        raise ConfigError("categories", f"must be a whole number ≥ 2, got {categories!r}")
    if target is not None and not 0 < target < 1:
        raise ConfigError("target", f"a share's margin is between 0 and 1, got {target!r}")
    return plan_local(
        respondents, categories, _epsilon(epsilon), mechanism, compact=compact, target=target
    )
