"""A key selection's plan: its rule, policy, threshold and δ, all from public inputs (no data).

A plan is what the manifest states and what the planner shows before any row is read: the rule
(the optimal per-key rule of Desfontaines et al. 2022 in pure scopes, or there a discrete
Gaussian threshold with a proved (ε, δ) when its τ is the smaller; discrete Gaussian
thresholding in zCDP scopes; discrete Laplace thresholding on request), the policy for units
holding several keys (`per_key`: each key a unit holds counts 1 and the budget is split over the
≤ m = c·G keys one unit can move, c = 2 under substitution: ε/m and δ_k with 1 − (1 − δ_k)^m = δ;
`weighted`: each unit spreads one unit of weight over the keys it holds, in L1 for Laplace, in L2
for Gaussian noise), τ, the noise law and the δ it spends. See docs/selection.md for the
derivations and PRIVACY.md for the guarantee.

Why δ: a key that only one unit holds exists in one dataset and not in its neighbour, so no noise
can make its release ε-indistinguishable; what can be bounded is the probability that it is
released at all. For the optimal rule and the Laplace and zCDP Gaussian threshold rules that
probability, for the worst unit, is δ: the optimal rule spends exactly δ (p(1) = δ per key,
composed over the keys a unit moves), a threshold rule spends a proved upper bound ≤ δ (`_tails`)
and τ is the smallest threshold for which that bound is ≤ δ. The pure-scope Gaussian threshold
spends δ ≥ max over ℓ of δ₁(m − ℓ) + ℓ·P(Z ≥ τ − w), ℓ of a unit's keys lone and the rest
shared: the lone keys' release and δ₁ (`noise_delta`), the tail of the shared keys' privacy
loss, so there the release is not ε-DP outside the lone-key event (`_gaussian_pure`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import StrEnum
from fractions import Fraction

import numpy as np

from dprelease.change import ProtectedChange
from dprelease.errors import SpecError
from dprelease.loss import Measure, PrivacyLoss
from dprelease.mechanism.noise import NoiseSource, exact_scale, exact_sigma2
from dprelease.mechanism.selection import _draw
from dprelease.mechanism.selection._gaussian_pure import calibrate
from dprelease.mechanism.selection._optimal import keep_table, per_key_delta
from dprelease.mechanism.selection._tails import (
    gaussian_tail,
    gaussian_tail_upper,
    laplace_tail,
    laplace_tail_upper,
)
from dprelease.spec import SelectDomain

#: The counts the planner's table shows keep probabilities for.
TABLE_COUNTS = (1, 5, 10, 20, 50, 100, 1000)
#: The weight one unit spreads over its keys under the L1 policy: lcm(1..G) when that is at most
#: 2**20 (G ≤ 16: every 1/g exact), else 2**20 (each share rounded down, by < 2**-20·g of it).
_L1_UNIT_LIMIT = 1 << 20
#: The weight one unit spreads (in L2) under the Gaussian policy: ⌊L/√g⌋ per key, L = 2**12.
_L2_UNIT = 1 << 12


class Rule(StrEnum):
    """How a candidate key's fate is drawn from its count (or weight) of units."""

    OPTIMAL = "optimal"  # keep with probability p(n) of Desfontaines et al.'s optimal rule
    LAPLACE = "laplace_threshold"  # keep iff weight + discrete Laplace noise ≥ τ
    GAUSSIAN = "gaussian_threshold"  # keep iff weight + discrete Gaussian noise ≥ τ


class Policy(StrEnum):
    """How units that hold several keys count towards each (see the module docstring)."""

    PER_KEY = "per_key"
    WEIGHTED = "weighted"


@dataclass(frozen=True)
class SelectionPlan:
    """Everything about one key selection that is decided before any row is read."""

    loss: PrivacyLoss  # the selection's own share of the release's loss (ε or ρ)
    delta: Fraction  # δ it spends (the ledger charges this)
    max_keys_per_unit: int  # G
    change: ProtectedChange
    rule: Rule
    policy: Policy
    #: w_g: the integer weight a unit holding g candidate keys gives each, g = 1..G.
    weights: tuple[int, ...]
    threshold: int | None = None  # τ in weight units (threshold rules)
    scale: Fraction | None = None  # the Laplace scale b or the Gaussian σ² (threshold rules)
    delta_bound: Fraction | None = None  # the proved δ of τ, ≤ delta (threshold rules)
    key_loss: tuple[Fraction, Fraction] | None = None  # (ε, δ) per key (optimal rule)
    #: pure-scope Gaussian threshold: the proved δ₁(m) of its noise (the shared keys' loss tail
    #: when all of a unit's keys are shared) and δ₂ = G·P(Z ≥ τ − w) (any lone key released);
    #: delta_bound = max over ℓ of δ₁(m − ℓ) + ℓ·P(Z ≥ τ − w) ≤ δ₁ + δ₂ (`_gaussian_pure`)
    noise_delta: Fraction | None = None
    lone_delta: Fraction | None = None
    #: why the plan chose this rule when none was named (None: the caller named it), in words
    #: the manifest and the planner state
    auto_reason: str | None = None

    # ----------------------------------------------------------------- what it promises

    def tau(self, keys_per_unit: int = 1) -> int:
        """The number of units (each holding `keys_per_unit` keys) from which a key is kept with
        probability at least 1/2: the threshold a reader can picture."""
        if self.rule is Rule.OPTIMAL:
            return keep_table(*self._key_loss()).median_count()
        weight = self.weights[keys_per_unit - 1]
        return math.ceil(self._threshold() / weight)

    def keep_probability(self, n: int | np.ndarray, keys_per_unit: int = 1) -> np.ndarray:
        """The probability that a key held by n units, each holding `keys_per_unit` candidate
        keys, is released (floating point: for tables, never for δ)."""
        counts = np.atleast_1d(np.asarray(n, dtype=np.int64))
        if self.rule is Rule.OPTIMAL:
            table = keep_table(*self._key_loss())
            return np.array([float(sum(table.bounds(int(c))) / 2) for c in counts])
        j = self._threshold() - counts * self.weights[keys_per_unit - 1]
        if self.rule is Rule.LAPLACE:
            return laplace_tail(self._scale(), j)
        return gaussian_tail(self._scale(), j)

    def keep_table(
        self, counts: tuple[int, ...] = TABLE_COUNTS, keys_per_unit: int = 1
    ) -> list[tuple[int, float]]:
        """(n, probability that a key held by n units is released) for the planner."""
        probabilities = self.keep_probability(np.array(counts), keys_per_unit).tolist()
        return list(zip(counts, probabilities, strict=True))

    # ----------------------------------------------------------------- the draw

    def select(self, units: np.ndarray, source: NoiseSource | None = None) -> np.ndarray:
        """Which candidate keys are released: a bool mask over the rows of `units`.

        `units[k, g − 1]` is the number of units holding candidate key k that hold g candidate
        keys in all (g = 1..G, after each unit was bounded to G keys); a row of zeros is a key
        nobody holds, which is never released. One draw per row, whatever the counts."""
        table = np.asarray(units)
        if table.ndim != 2 or table.shape[1] != self.max_keys_per_unit:
            raise ValueError(f"units must have one column per g = 1..{self.max_keys_per_unit}")
        if table.size and table.min() < 0:
            raise ValueError("units per key cannot be negative")
        held = table.sum(axis=1)
        if self.rule is Rule.OPTIMAL:
            epsilon, delta = self._key_loss()
            keep = _draw.optimal_keep(held, epsilon, delta, source)
        else:
            if self.policy is Policy.PER_KEY:  # every key counts w_1 (1, or a pure Gaussian's w)
                weights = held * self.weights[0]
            else:
                weights = table @ np.array(self.weights)
            laplace = self.rule is Rule.LAPLACE
            # a lone key's δ was proved for exactly this law: more noise would mean more δ, so
            # the draw's law must be the plan's, not one rounded again (review requirement 1)
            exact = (exact_scale if laplace else exact_sigma2)(self._scale())
            if exact != self._scale():
                raise AssertionError("the selection's noise law differs from its proved one")
            noise = (_draw.laplace_noise if laplace else _draw.gaussian_noise)(self._scale())
            keep = _draw.threshold_keep(weights, self._threshold(), noise, source)
        return keep & (held > 0)

    # ----------------------------------------------------------------- internals

    def _key_loss(self) -> tuple[Fraction, Fraction]:
        assert self.key_loss is not None
        return self.key_loss

    def _threshold(self) -> int:
        assert self.threshold is not None
        return self.threshold

    def _scale(self) -> Fraction:
        assert self.scale is not None
        return self.scale


def moved_keys(change: ProtectedChange, max_keys_per_unit: int) -> int:
    """How many keys' counts one protected change can move: G (add/remove), 2G (substitute)."""
    return max_keys_per_unit * (2 if change is ProtectedChange.SUBSTITUTE else 1)


def l1_weights(max_keys_per_unit: int) -> tuple[int, ...]:
    """w_g = ⌊L/g⌋ with the L1 weight unit L (see `_L1_UNIT_LIMIT`): a unit's weights add to ≤ L."""
    unit = math.lcm(*range(1, max_keys_per_unit + 1))
    unit = unit if unit <= _L1_UNIT_LIMIT else _L1_UNIT_LIMIT
    return tuple(unit // g for g in range(1, max_keys_per_unit + 1))


def l2_weights(max_keys_per_unit: int) -> tuple[int, ...]:
    """w_g = ⌊L/√g⌋ (exactly, by integer square root): a unit's weights have L2 norm ≤ L."""
    if max_keys_per_unit == 1:
        return (1,)
    return tuple(math.isqrt(_L2_UNIT**2 // g) for g in range(1, max_keys_per_unit + 1))


def default_policy(measure: Measure, max_keys_per_unit: int) -> Policy:
    """The policy a spec gets unless it names one: `per_key` for one key per unit and in pure
    scopes (where the rule is then the better of Δ-scaling and a Gaussian threshold, by τ:
    `plan_selection`); in zCDP scopes `weighted` for G ≥ 2 (its L2 weights never lose to
    per-key scaling: a unit holding G keys gets the same noise-to-signal ratio, one holding
    fewer a better one). docs/selection.md: the measurements."""
    if measure is Measure.ZCDP and max_keys_per_unit >= 2:
        return Policy.WEIGHTED
    return Policy.PER_KEY


def plan_selection(
    loss: PrivacyLoss,
    delta: Fraction,
    max_keys_per_unit: int = 1,
    change: ProtectedChange = ProtectedChange.ADD_REMOVE,
    *,
    rule: Rule | None = None,
    policy: Policy | None = None,
) -> SelectionPlan:
    """The selection that spends `loss` (its ε or ρ) and at most `delta`, for units holding up
    to `max_keys_per_unit` candidate keys. ValueError (saying what to change) when no threshold
    can meet δ at this loss within the samplers' range."""
    delta = Fraction(delta)
    if not 0 < delta < Fraction(1, 2):
        raise ValueError("δ for key selection must be in (0, 1/2)")
    if isinstance(max_keys_per_unit, bool) or max_keys_per_unit < 1:
        raise ValueError("max_keys_per_unit must be a positive integer")
    zcdp = loss.measure is Measure.ZCDP
    if rule is Rule.OPTIMAL and policy is Policy.WEIGHTED:
        raise ValueError("the optimal rule is per key; a weighted policy thresholds a weight")
    if zcdp and rule not in (None, Rule.GAUSSIAN):
        raise ValueError(f"a zCDP scope selects keys by {Rule.GAUSSIAN.value}")
    if not zcdp and rule is Rule.GAUSSIAN and policy is Policy.WEIGHTED:
        raise ValueError(
            f"in a pure scope {Rule.GAUSSIAN.value} counts each key 1: use policy per_key"
        )
    if not zcdp and rule is None:
        return _best_pure(loss, delta, max_keys_per_unit, change, policy)
    if rule is None:
        plan = plan_selection(
            loss, delta, max_keys_per_unit, change, rule=Rule.GAUSSIAN, policy=policy
        )
        return replace(plan, auto_reason=f"a zCDP scope selects keys by {Rule.GAUSSIAN.value}")
    policy = policy or (
        Policy.PER_KEY if rule is Rule.GAUSSIAN and not zcdp
        else default_policy(loss.measure, max_keys_per_unit)
    )  # fmt: skip
    if policy is Policy.WEIGHTED and rule is Rule.OPTIMAL:
        rule = Rule.LAPLACE  # the optimal rule is per key; a weighted policy thresholds a weight
    g = max_keys_per_unit
    base = SelectionPlan(loss, delta, g, change, rule, policy, weights=(1,) * g)
    moved = moved_keys(change, g)
    if rule is Rule.GAUSSIAN and not zcdp:
        step, threshold, sigma2, noise_delta, lone, bound = calibrate(loss.amount, delta, g, moved)
        return replace(
            base,
            weights=(step,) * g,
            threshold=threshold,
            scale=sigma2,
            delta_bound=bound,
            noise_delta=noise_delta,
            lone_delta=lone,
        )
    if rule is Rule.OPTIMAL:
        key_loss = (loss.amount / moved, per_key_delta(delta, moved))
        keep_table(*key_loss)  # fail here, not at the draw, if ε is out of its range
        return replace(base, key_loss=key_loss)
    multiplicity = 2 if change is ProtectedChange.SUBSTITUTE else 1
    if rule is Rule.LAPLACE:
        weights = (1,) * g if policy is Policy.PER_KEY else l1_weights(g)
        sensitivity = moved if policy is Policy.PER_KEY else multiplicity * weights[0]
        scale = exact_scale(Fraction(sensitivity) / loss.amount)
    else:
        weights = (1,) * g if policy is Policy.PER_KEY else l2_weights(g)
        squared = moved if policy is Policy.PER_KEY else multiplicity * weights[0] ** 2
        scale = exact_sigma2(Fraction(squared) / (2 * loss.amount))
    threshold, bound = _threshold(rule, scale, weights, policy, delta)
    return replace(base, weights=weights, threshold=threshold, scale=scale, delta_bound=bound)


def _new_key_delta(
    rule: Rule, scale: Fraction, weights: tuple[int, ...], policy: Policy, threshold: int
) -> Fraction | None:
    """A proved upper bound on the probability that any key only the protected unit holds is
    released (None when it cannot be below 1/2 at this threshold).

    Per key: a unit holding g keys gives each w_g (per_key: 1), so a key it alone holds has
    weight w_g and is released with probability P(Z ≥ τ − w_g); at most g of its keys are new,
    so the union bound is g·P(Z ≥ τ − w_g), and δ is its largest value over g = 1..G (per_key:
    G·P(Z ≥ τ − 1))."""
    tail = laplace_tail_upper if rule is Rule.LAPLACE else gaussian_tail_upper
    worst = Fraction(0)
    for count, weight in _lone_unit_cases(weights, policy):
        if threshold - weight < 1:
            return None
        worst = max(worst, count * tail(scale, threshold - weight))
    return worst


def _lone_unit_cases(weights: tuple[int, ...], policy: Policy) -> list[tuple[int, int]]:
    """(how many keys a lone unit can hold, the weight it gives each): per_key (G, 1); weighted
    (g, w_g) for g = 1..G."""
    if policy is Policy.PER_KEY:
        return [(len(weights), 1)]
    return list(zip(range(1, len(weights) + 1), weights, strict=True))


def _guess(
    rule: Rule, scale: Fraction, weights: tuple[int, ...], policy: Policy, delta: Fraction
) -> int:
    """A floating-point first guess of τ (then proved and moved by `_threshold`)."""
    guess = 1
    for count, weight in _lone_unit_cases(weights, policy):
        target = float(delta) / count
        if rule is Rule.LAPLACE:
            b = float(scale)
            j = b * (math.log(1 / target) - math.log1p(math.exp(-1 / b)))
        else:
            lo, hi = 1, 1
            while gaussian_tail(scale, hi)[0] > target:
                lo, hi = hi, 2 * hi
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if gaussian_tail(scale, mid)[0] > target else (lo, mid)
            j = hi
        guess = max(guess, math.ceil(j) + weight)
    return guess


def _threshold(
    rule: Rule, scale: Fraction, weights: tuple[int, ...], policy: Policy, delta: Fraction
) -> tuple[int, Fraction]:
    """The smallest τ whose proved new-key δ is ≤ `delta`, and that proved δ."""

    def proved(t: int) -> Fraction | None:
        bound = _new_key_delta(rule, scale, weights, policy, t)
        return bound if bound is not None and bound <= delta else None

    low = max(weights)  # no threshold ≤ every weight is proved (a lone key passes it surely)
    high = max(_guess(rule, scale, weights, policy, delta), low + 1)
    step = 1
    while proved(high) is None:
        low, high, step = high, high + step, 2 * step
    while high - low > 1:  # proved(high) holds, proved(low) does not (or low is too small)
        middle = (low + high) // 2
        low, high = (low, middle) if proved(middle) is not None else (middle, high)
    threshold = high
    bound = proved(threshold)
    assert bound is not None
    return threshold, bound


def plan_for_domain(
    domain: SelectDomain,
    loss: PrivacyLoss,
    delta: Fraction,
    change: ProtectedChange,
    path: str = "domain",
) -> SelectionPlan:
    """The plan of a spec's selected domain, given its share of the loss and its δ. A `rule:`
    the scope's measure or the domain's policy cannot use is refused at `{path}.rule` (the
    domain's YAML path), saying what to write; ValueError when no threshold meets δ."""
    policy = Policy(domain.policy) if domain.policy is not None else None
    rule = Rule(domain.rule) if domain.rule is not None else None
    if rule is not None:
        refusal = _rule_refusal(rule, loss.measure, policy)
        if refusal is not None:
            raise SpecError(f"{path}.rule", refusal)
    try:
        return plan_selection(
            loss, delta, domain.max_keys_per_unit, change, rule=rule, policy=policy
        )
    except ValueError as exc:
        if rule is Rule.GAUSSIAN and loss.measure is Measure.PURE:
            raise SpecError(f"{path}.rule", str(exc)) from None  # it says: leave rule out
        raise


def _rule_refusal(rule: Rule, measure: Measure, policy: Policy | None) -> str | None:
    """Why a named rule cannot be used in this scope with this policy (None: it can)."""
    if measure is Measure.ZCDP and rule is not Rule.GAUSSIAN:
        return (
            f"a zCDP scope selects keys by {Rule.GAUSSIAN.value} ({rule.value} is a pure-ε "
            f"rule): write rule: {Rule.GAUSSIAN.value}, or leave rule out"
        )
    if rule is Rule.OPTIMAL and policy is Policy.WEIGHTED:
        return (
            f"the optimal rule counts each key 1 and policy weighted thresholds a weight: write "
            f"rule: {Rule.LAPLACE.value} or policy: per_key, or leave rule out"
        )
    if rule is Rule.GAUSSIAN and measure is Measure.PURE and policy is Policy.WEIGHTED:
        return (
            f"in a pure scope {Rule.GAUSSIAN.value} counts each key 1: write policy: per_key, "
            "or leave rule out"
        )
    return None


def _best_pure(
    loss: PrivacyLoss,
    delta: Fraction,
    max_keys_per_unit: int,
    change: ProtectedChange,
    policy: Policy | None,
) -> SelectionPlan:
    """A pure scope's selection when the spec names no rule. Weighted: discrete Laplace on the
    L1 weights. Per key (the default): the optimal rule with the budget split over the m keys
    one change moves (Δ-scaling), or, when m ≥ 2, a discrete Gaussian threshold, whichever has
    the smaller τ, the count from which a key is kept with probability ≥ 1/2 (both rules' keep
    probabilities depend on that count only, so the planner's table ranks them the same way
    for every unit); a tie keeps the optimal rule."""
    g = max_keys_per_unit
    if policy is Policy.WEIGHTED:
        plan = plan_selection(loss, delta, g, change, rule=Rule.LAPLACE, policy=policy)
        return replace(plan, auto_reason="policy weighted thresholds the units' weights")
    optimal = plan_selection(loss, delta, g, change, rule=Rule.OPTIMAL)
    if moved_keys(change, g) < 2:
        return replace(
            optimal,
            auto_reason="one change moves one key's count, where the optimal rule keeps a key "
            "with the highest probability any (ε, δ)-DP count rule can, at every count",
        )
    try:
        gaussian = plan_selection(loss, delta, g, change, rule=Rule.GAUSSIAN)
    except ValueError:  # no proved Gaussian threshold at this (ε, δ): Δ-scaling is what is left
        return replace(
            optimal,
            auto_reason=f"no {Rule.GAUSSIAN.value} could be proved to meet δ at this ε",
        )
    taus = {Rule.OPTIMAL: optimal.tau(), Rule.GAUSSIAN: gaussian.tau()}
    chosen = gaussian if taus[Rule.GAUSSIAN] < taus[Rule.OPTIMAL] else optimal
    other = Rule.OPTIMAL if chosen is gaussian else Rule.GAUSSIAN
    tie = " (a tie keeps the optimal rule)" * (taus[other] == taus[chosen.rule])
    reason = (
        f"the smaller τ, the count of units from which a key is kept with probability ≥ 1/2: "
        f"{taus[chosen.rule]} units, against {taus[other]} for {other.value}{tie}"
    )
    return replace(chosen, auto_reason=reason)
