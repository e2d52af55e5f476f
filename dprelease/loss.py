"""The privacy loss: how much a release may reveal, in a measure and an exact amount.

Why exact rationals: a scope's cap is split into shares (one per month, per statistic, per level)
that are charged against it over years; in floating point the shares of 1/3 can add up to more
than the cap. A float is read as the decimal it prints as (0.3 → 3/10): that is what a steward
wrote in YAML or on the command line.

Every amount accepted is also one that can be stated: manifests, metadata and messages show it as
a double, so a value beyond the range of a normal double (1e-400, 1e400) is refused where it is
read, with one line, instead of failing later while an error message formats it.

Why a measure: pure ε-DP (Laplace noise) composes by adding ε; ρ-zCDP (Gaussian noise) composes
by adding ρ. A loss knows its measure, so amounts of different measures never mix by accident.
"""

from __future__ import annotations

import math
import numbers
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal, localcontext
from enum import StrEnum
from fractions import Fraction

#: What an ε (or ρ) may be given as: 0.5, "1/12", Fraction(1, 12), Decimal("0.1").
Amount = float | int | Fraction | Decimal | str
#: The range of amounts that a double states to full precision (the normal doubles): below it a
#: float rounds to a subnormal or to 0, above it to infinity.
SMALLEST_STATABLE = Fraction(sys.float_info.min)
LARGEST_STATABLE = Fraction(sys.float_info.max)


def exact_rational(
    value: object, *, binary_floats: bool = False, text: bool = True
) -> Fraction | None:
    """`value` as an exact rational, or None when it is not a finite number: the one reading of
    a number every exact parameter goes through (an ε, a cap, a noise scale, a quantile's p).

    Integers, Fractions and Decimals are what they are. A float is the decimal it prints as
    (0.3 → 3/10: what a person wrote in YAML or on a command line), or with `binary_floats` the
    binary value it holds (a parameter computed in floats, as a sampler is given it; other real
    numbers too). Text ("1/12", "0.5") is read only with `text`. A boolean is no number."""
    if isinstance(value, bool):
        return None
    try:
        if isinstance(value, float) or (binary_floats and isinstance(value, numbers.Real)):
            if isinstance(value, numbers.Rational):
                return Fraction(int(value.numerator), int(value.denominator))
            as_float = float(value)
            if not math.isfinite(as_float):
                return None
            return Fraction(as_float) if binary_floats else Fraction(repr(as_float))
        if isinstance(value, numbers.Rational | Decimal) or (text and isinstance(value, str)):
            return Fraction(value)  # type: ignore[arg-type]  # each is a Fraction's argument
    except (ValueError, TypeError, ZeroDivisionError, OverflowError):
        return None
    return None


def exact_positive(value: Amount) -> Fraction:
    """`value` as an exact rational > 0 that a double can state; ValueError (saying why) for
    ≤ 0, NaN, inf, non-numbers, and values outside [SMALLEST_STATABLE, LARGEST_STATABLE]."""
    if isinstance(value, bool):
        raise ValueError(f"must be a number > 0, got {value!r}")
    exact = exact_rational(value)
    if exact is None:
        raise ValueError(f"must be a finite number > 0, got {value!r}")
    if exact <= 0:
        raise ValueError(f"must be > 0, got {value!r}")
    if exact < SMALLEST_STATABLE:
        raise ValueError(
            f"must be at least {float(SMALLEST_STATABLE):.6g} (too small to state as a number), "
            f"got {value!r}"
        )
    if exact > LARGEST_STATABLE:
        raise ValueError(
            f"must be at most {float(LARGEST_STATABLE):.6g} (too large to state as a number), "
            f"got {value!r}"
        )
    return exact


def decimal_text(value: Fraction | int, digits: int = 6) -> str:
    """`value` to `digits` significant digits, as `f"{float(value):.{digits}g}"` prints it, but
    for every rational: one beyond the range of a double (a sum of large charges, a noise scale
    Δ/ε) is rounded in decimal arithmetic instead of overflowing or printing as 0."""
    try:
        as_float = float(value)
    except OverflowError:
        as_float = math.inf
    if math.isfinite(as_float) and (value == 0 or abs(as_float) >= sys.float_info.min):
        return f"{as_float:.{digits}g}"
    exact = Fraction(value)
    with localcontext(prec=digits):
        rounded = Decimal(exact.numerator) / Decimal(exact.denominator)
    mantissa, _, exponent = f"{rounded:.{digits - 1}e}".partition("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent):+03d}"


def typed_text(value: Fraction) -> str:
    """`value` as a user types it, exactly: the decimal when it is exact (0.25), else the
    fraction (1/3); for a message that tells what to type (`--epsilon 1/3`)."""
    decimal = decimal_text(value)
    return decimal if Fraction(decimal) == value else str(value)


#: A terminating decimal with more significant digits than this is shown as a fraction instead.
_LONGEST_DECIMAL = 15


def amount_text(value: Fraction | int) -> str:
    """`value` for people to read, exactly and at a glance: an integer or a short terminating
    decimal as itself (4, 0.25, 0.346573590279), any other rational as its fraction with a
    rounded decimal beside it (1/3 ≈ 0.333). A scope's cap, what it spent and what a release
    charged are exact rationals; as a double, 1/3 shows as 0.3333333333333333 and 11/3 as
    3.6666666666666665, which are neither exact nor readable."""
    exact = Fraction(value)
    unfactored, powers = exact.denominator, 0
    for prime in (2, 5):
        while unfactored % prime == 0:
            unfactored, powers = unfactored // prime, powers + 1
    if unfactored == 1:  # exact.denominator divides 10**powers: the decimal terminates
        with localcontext(prec=len(str(abs(exact.numerator))) + powers + 1):
            decimal = Decimal(exact.numerator) / Decimal(exact.denominator)
        if len(decimal.normalize().as_tuple().digits) <= _LONGEST_DECIMAL:
            return f"{decimal.normalize():f}"
    return f"{exact} ≈ {_about(exact)}"


def _about(exact: Fraction) -> str:
    """Three significant digits, without an exponent where positional digits read better."""
    text = decimal_text(exact, 3)
    if "e" in text and Fraction(1, 10**6) <= abs(exact) < 10**15:
        return f"{Decimal(text):f}"
    return text


def epsilon_of_zcdp(rho: Fraction | float, delta: float) -> float:
    """The ε of (ε, δ)-DP that ρ-zCDP implies: ρ + 2√(ρ·log(1/δ)) (Bun & Steinke 2016,
    Prop. 1.3). Rounded as a double: for stating, never for accounting."""
    value = float(rho)
    return value + 2.0 * math.sqrt(value * math.log(1.0 / delta))


def loss_text(measure: Measure, amount: Fraction | int, delta: float | None = None) -> str:
    """An amount of privacy loss for people, named by its measure: ``ε = 0.25``, ``ρ = 1/120 ≈
    0.00833``; with `delta`, a ρ also says the (ε, δ)-DP it implies, ``ρ = 0.123, i.e. (3.33,
    1e-09)-DP``. The one spelling of an amount (`amount_text`) in every message, table and
    metadata value, so that a ρ is never read as an ε: 0.123 as ε is a factor e^0.123 on the
    odds, as ρ at δ = 10⁻⁹ a factor up to e^3.33."""
    text = f"{measure.symbol} = {amount_text(amount)}"
    if measure is Measure.ZCDP and delta is not None:
        text += f", i.e. ({epsilon_of_zcdp(Fraction(amount), delta):.3g}, {delta:g})-DP"
    return text


def split_by_weights(total: Fraction, weights: Sequence[Fraction]) -> list[Fraction]:
    """`total` in shares proportional to `weights`, exactly: the shares sum to `total` with no
    drift, so sequential composition of the parts never spends more than the whole."""
    if not weights:
        raise ValueError("there must be at least one weight")
    if any(isinstance(w, bool) or not isinstance(w, numbers.Rational) for w in weights):
        raise ValueError(f"weights must be exact (ints or Fractions), got {list(weights)!r}")
    if any(weight <= 0 for weight in weights):
        raise ValueError("every weight must be > 0")
    whole = sum(weights, Fraction(0))
    shares = [total * weight / whole for weight in weights[:-1]]
    shares.append(total - sum(shares, Fraction(0)))
    return shares


class Measure(StrEnum):
    """How losses compose: pure ε-DP adds ε, ρ-zCDP adds ρ."""

    PURE = "pure"
    ZCDP = "zcdp"

    @property
    def symbol(self) -> str:
        return "ε" if self is Measure.PURE else "ρ"

    @property
    def native_mechanism(self) -> Mechanism:
        """The noise whose guarantee is stated in this measure: Laplace for ε, Gaussian for ρ."""
        return Mechanism.LAPLACE if self is Measure.PURE else Mechanism.GAUSSIAN


class Mechanism(StrEnum):
    """The noise a release adds: exact discrete Laplace (ε-DP) or discrete Gaussian (ρ-zCDP)."""

    LAPLACE = "laplace"
    GAUSSIAN = "gaussian"

    @property
    def native_measure(self) -> Measure:
        """The measure this mechanism's guarantee is stated in (a Laplace release also fits a
        zCDP scope: ε-DP is ε²/2-zCDP; a Gaussian one never fits a pure scope)."""
        return Measure.PURE if self is Mechanism.LAPLACE else Measure.ZCDP


def zcdp_of_pure(epsilon: Fraction) -> Fraction:
    """ρ of an ε-DP release: ε-DP implies ε²/2-zCDP (Bun & Steinke 2016, Prop. 1.4)."""
    return epsilon * epsilon / 2


def pure_within_zcdp(rho: Fraction, resolution: int = 10**12) -> Fraction:
    """The largest ε, a multiple of 1/resolution, whose ε²/2 is at most `rho`: a Laplace
    release spending it fits a zCDP share of ρ (rounded down, so never above)."""
    scaled = math.isqrt(math.floor(2 * rho * resolution * resolution))
    return Fraction(scaled, resolution)


@dataclass(frozen=True, order=True)
class PrivacyLoss:
    """An exact amount of privacy loss in one measure (ε for pure DP, ρ for zCDP)."""

    measure: Measure
    amount: Fraction

    @classmethod
    def pure(cls, epsilon: Fraction) -> PrivacyLoss:
        return cls(Measure.PURE, Fraction(epsilon))

    @classmethod
    def zcdp(cls, rho: Fraction) -> PrivacyLoss:
        return cls(Measure.ZCDP, Fraction(rho))

    def __add__(self, other: PrivacyLoss) -> PrivacyLoss:
        self._same_measure(other)
        return PrivacyLoss(self.measure, self.amount + other.amount)

    def __mul__(self, factor: Fraction) -> PrivacyLoss:
        return PrivacyLoss(self.measure, self.amount * factor)

    def split(self, weights: Sequence[Fraction]) -> list[PrivacyLoss]:
        """Sequential composition in reverse: parts in proportion to `weights`, exactly
        adding up to this loss."""
        return [
            PrivacyLoss(self.measure, share) for share in split_by_weights(self.amount, weights)
        ]

    @property
    def epsilon(self) -> Fraction:
        """The ε of a pure loss (ValueError for another measure: there is no exact ε of a ρ)."""
        if self.measure is not Measure.PURE:
            raise ValueError(f"a {self.measure.value} loss has no pure ε")
        return self.amount

    @property
    def rho(self) -> Fraction:
        """The ρ of a zCDP loss (ValueError for a pure one: use `zcdp_of_pure` to convert)."""
        if self.measure is not Measure.ZCDP:
            raise ValueError(f"a {self.measure.value} loss is not stated in ρ")
        return self.amount

    def _same_measure(self, other: PrivacyLoss) -> None:
        if other.measure is not self.measure:
            raise ValueError(f"cannot add a {other.measure.value} loss to a {self.measure.value}")

    def __str__(self) -> str:
        return f"{self.measure.symbol} = {self.amount}"


def laplace_epsilon(loss: PrivacyLoss) -> Fraction:
    """The ε that Laplace noise (or another ε-DP mechanism) may spend from `loss`: its own ε in a
    pure release; in a zCDP one the largest ε with ε²/2 ≤ its ρ (`pure_within_zcdp`)."""
    return loss.amount if loss.measure is Measure.PURE else pure_within_zcdp(loss.amount)
