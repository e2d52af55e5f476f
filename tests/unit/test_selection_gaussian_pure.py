"""Discrete Gaussian thresholding in pure scopes: the proved (ε, δ) against brute force, the
calibration, and an empirical privacy audit of a unit holding G keys on neighbouring datasets.

The exactness of the draw (χ² against the exact keep probabilities) and the lone-key audit run
with the other rules' in `test_selection_draw.py` (plan "gaussian_pure"). Every statistical test
here has a fixed seed and a stated false-alarm rate.
"""

from __future__ import annotations

import math
from decimal import Decimal, localcontext
from fractions import Fraction
from itertools import product

import numpy as np
import pytest
from scipy import stats

from dprelease.change import ProtectedChange
from dprelease.loss import PrivacyLoss
from dprelease.mechanism.noise import NoiseSource
from dprelease.mechanism.selection import Policy, Rule, SelectionPlan, plan_selection
from dprelease.mechanism.selection._gaussian_pure import noise_delta, split_delta, sum_factor
from dprelease.mechanism.selection._plan import moved_keys
from dprelease.mechanism.selection._statement import selection_entry
from dprelease.mechanism.selection._tails import gaussian_tail_upper


def pmf(sigma2: float, reach: int) -> tuple[np.ndarray, np.ndarray]:
    """The discrete Gaussian's pmf on −reach..reach (its mass beyond is below 1e-300 here)."""
    z = np.arange(-reach, reach + 1)
    weights = np.exp(-(z.astype(float) ** 2) / (2 * sigma2))
    return z, weights / weights.sum()


def brute_delta(sigma2: float, epsilon: float, shifted: int, step: int = 1) -> tuple[float, float]:
    """sup_A P(A) − e^ε·Q(A) both ways, by summing over every noise vector: P the law of
    c + w + Z (on `shifted` coordinates, w = `step`), Q that of c + Z. Independent of the
    proof's algebra."""
    reach = int(12 * math.sqrt(sigma2)) + 10
    _, p = pmf(sigma2, reach)
    here, there = p[step:], p[:-step]  # the same output y: noise z under P, z + w under Q
    joint_p, joint_q = here, there
    for _ in range(shifted - 1):
        joint_p = np.multiply.outer(joint_p, here)
        joint_q = np.multiply.outer(joint_q, there)
    factor = math.exp(epsilon)
    forward = float(np.clip(joint_p - factor * joint_q, 0, None).sum())
    backward = float(np.clip(joint_q - factor * joint_p, 0, None).sum())
    return forward, backward


@pytest.mark.parametrize(
    ("sigma2", "epsilon", "shifted", "step"),
    [
        (Fraction(3), Fraction(1, 2), 1, 1),
        (Fraction(3), Fraction(1, 2), 2, 1),
        (Fraction(9, 2), Fraction(1, 3), 3, 1),
        (Fraction(12), Fraction(1), 2, 1),
        (Fraction(2), Fraction(1), 3, 1),
        (Fraction(40), Fraction(1, 2), 3, 1),
        (Fraction(48), Fraction(1, 2), 2, 4),
        (Fraction(27), Fraction(1, 2), 3, 2),
    ],
)
def test_noise_delta_bounds_the_brute_force_delta_tightly(
    sigma2: Fraction, epsilon: Fraction, shifted: int, step: int
) -> None:
    """The proved δ₁ is ≥ the hockey-stick divergence summed over every noise vector (both
    directions), and within 0.1% of it, for weights moving by 1 and by w > 1."""
    proved = float(noise_delta(sigma2, epsilon, shifted, step))
    forward, backward = brute_delta(float(sigma2), float(epsilon), shifted, step)
    assert forward == pytest.approx(backward, rel=1e-9)  # the loss has one law both ways
    assert forward <= proved <= forward * 1.001 + 1e-15


def test_the_sum_of_discrete_gaussians_is_bounded_by_a_wider_one() -> None:
    """P(S = x) ≤ κ·P(Z' = x) for every x, S the sum of s iid discrete Gaussians and Z' one of
    variance parameter s·σ², at small σ² where the periodic factor shows (κ > 1)."""
    for sigma2, shifted in ((Fraction(1, 2), 2), (Fraction(1, 2), 3), (Fraction(1), 4)):
        kappa = float(sum_factor(sigma2, shifted))
        assert kappa > 1
        reach = 40
        _, p = pmf(float(sigma2), reach)
        total = p
        for _ in range(shifted - 1):
            total = np.convolve(total, p)
        _, wide = pmf(float(sigma2 * shifted), reach * shifted)
        assert (total <= kappa * wide * (1 + 1e-12) + 1e-300).all()
        assert (total > wide).any()  # not trivially: the factor is needed somewhere


#: π to 100 digits, for a reference κ computed far finer than `_real`'s 50 digits.
_PI = Decimal(
    "3.141592653589793238462643383279502884197169399375105820974944592307816406286208998628034825"
    "342117068"
)


def reference_kappa(sigma2: Fraction, shifted: int) -> Decimal:
    """(1 + η)/(1 − η), η = (1 + 2q/(1 − q))^{s−1} − 1, q = e^{−2π²σ²/s}, at 120 digits."""
    with localcontext() as ctx:
        ctx.prec = 120
        variance = Decimal(sigma2.numerator) / Decimal(sigma2.denominator)
        q = (-2 * _PI * _PI * variance / shifted).exp()
        eta = (1 + 2 * q / (1 - q)) ** (shifted - 1) - 1
        return (1 + eta) / (1 - eta)


@pytest.mark.parametrize(
    ("sigma2", "shifted"),
    [(Fraction(1, 2), 2), (Fraction(1, 2), 3), (Fraction(1), 4), (Fraction(3), 10),
     (Fraction(7577, 100), 6), (Fraction(50), 20), (Fraction(2, 5), 2)],
)  # fmt: skip
def test_the_sum_factor_is_at_least_its_value_at_high_precision(
    sigma2: Fraction, shifted: int
) -> None:
    """κ, rounded upward at 50 digits (θ^{s−1} by products, each rounded up), is ≥ the same
    formula at 120 digits, and above it by less than 10⁻⁴⁰ (κ − 1 itself is below 10⁻⁴⁰ at
    calibrated σ²; only the 50-digit rounding shows there)."""
    kappa = sum_factor(sigma2, shifted)
    reference = Fraction(reference_kappa(sigma2, shifted))
    assert reference <= kappa < reference + Fraction(1, 10**40)


def test_the_proved_delta_bounds_brute_force_at_a_calibrated_plan() -> None:
    """G = 2, ε = 1, δ = 1e-9 (add/remove): at the plan's own σ², w and τ, δ₁ summed over every
    pair of noise values (both directions, no use of the proof's algebra) is ≤ the proved δ₁ and
    within 0.1% of it."""
    plan = plan_selection(PrivacyLoss.pure(Fraction(1)), Fraction(1, 10**9), 2, rule=Rule.GAUSSIAN)
    assert plan.scale is not None and plan.noise_delta is not None
    step, factor = plan.weights[0], math.e
    _, p = pmf(float(plan.scale), int(13 * math.sqrt(plan.scale)) + 20)
    here, there = p[step:], p[:-step]  # output y: noise z under P, z + w under Q
    forward = backward = 0.0
    for start in range(0, here.size, 512):  # row blocks of the 2-d sum, to bound memory
        joint_p = np.multiply.outer(here[start : start + 512], here)
        joint_q = np.multiply.outer(there[start : start + 512], there)
        forward += math.fsum(np.clip(joint_p - factor * joint_q, 0, None).ravel())
        backward += math.fsum(np.clip(joint_q - factor * joint_p, 0, None).ravel())
    proved = float(plan.noise_delta)
    assert forward == pytest.approx(backward, rel=1e-6)
    assert max(forward, backward) <= proved * (1 + 1e-9) and proved <= forward * 1.001


def split_deltas(plan: SelectionPlan, epsilon: float) -> dict[tuple[int, int], float]:
    """The exact δ of the whole selection for each split (ℓ₀, ℓ₁) of the protected change's
    keys into lone keys of either side (ℓ₁ = 0 under add/remove) and ≤ m − ℓ₀ − ℓ₁ shared ones
    (m = G, or 2G under substitution), by enumeration: S's law by direct convolution, the lone
    keys released with their exact probability, every s up to that many shared keys, both
    directions (PRIVACY.md step 5's quantity). Independent of the proof's algebra."""
    assert plan.scale is not None and plan.threshold is not None
    g, step, sigma2 = plan.max_keys_per_unit, plan.weights[0], float(plan.scale)
    substitute = plan.change is ProtectedChange.SUBSTITUTE
    most = 2 * g if substitute else g
    _, p = pmf(sigma2, int(13 * math.sqrt(sigma2)) + 20)
    reach = (p.size - 1) // 2
    tail = math.fsum(p[reach + plan.threshold - step :])  # P(Z ≥ τ − w)
    laws = [np.array([1.0])]
    for _ in range(most):
        laws.append(np.convolve(laws[-1], p))
    e = math.exp(epsilon)
    worst: dict[tuple[int, int], float] = {}
    for lone0, lone1 in product(range(g + 1), range(g + 1) if substitute else (0,)):
        # 1 − (1 − tail)^ℓ without cancellation (tail ~ 10⁻¹⁰ here)
        p0, p1 = (-math.expm1(lone * math.log1p(-tail)) for lone in (lone0, lone1))
        for s in range(most - lone0 - lone1 + 1):
            x = np.arange(laws[s].size) - s * reach
            ratio = np.exp(-(s * step * step + 2 * step * x) / (2 * sigma2))  # Q/P of shared
            forward = p0 + math.fsum(laws[s] * np.clip((1 - p0) - e * (1 - p1) * ratio, 0, None))
            backward = p1 + math.fsum(laws[s] * np.clip((1 - p1) * ratio - e * (1 - p0), 0, None))
            key = (lone0, lone1)
            worst[key] = max(worst.get(key, 0.0), forward, backward)
    return worst


@pytest.mark.parametrize(
    ("epsilon", "delta", "g", "change"),
    [
        (Fraction(1), Fraction(1, 10**9), 1, ProtectedChange.SUBSTITUTE),
        (Fraction(1), Fraction(1, 10**9), 2, ProtectedChange.ADD_REMOVE),
        (Fraction(1, 2), Fraction(1, 100), 3, ProtectedChange.ADD_REMOVE),
        (Fraction(1, 2), Fraction(1, 100), 3, ProtectedChange.SUBSTITUTE),
    ],
)
def test_every_split_of_a_units_keys_meets_its_term_of_the_proved_delta(
    epsilon: Fraction, delta: Fraction, g: int, change: ProtectedChange
) -> None:
    """At calibrated plans, for every split of the protected change's keys into ℓ₀ and ℓ₁ lone
    keys and the shared rest, the exact δ (both directions) is ≤ that split's proved term
    δ₁(m − ℓ) + ℓ·P(Z ≥ τ − w), ℓ = max(ℓ₀, ℓ₁), so ≤ the plan's δ, the maximum of the terms;
    that maximum is tight (within 0.1% of the worst exact δ) and below δ₁ + δ₂ (review G6).
    At δ = 10⁻² the lone keys' tail is large enough for a wrong split to show."""
    plan = plan_selection(PrivacyLoss.pure(epsilon), delta, g, change, rule=Rule.GAUSSIAN)
    assert plan.scale is not None and plan.threshold is not None
    assert plan.delta_bound is not None and plan.noise_delta is not None
    assert plan.lone_delta is not None
    step, most = plan.weights[0], moved_keys(change, g)
    tail = gaussian_tail_upper(plan.scale, plan.threshold - step)
    exact = split_deltas(plan, float(epsilon))
    for (lone0, lone1), value in exact.items():
        lone = max(lone0, lone1)
        term = noise_delta(plan.scale, epsilon, most - lone, step) + lone * tail
        assert value <= float(term) * (1 + 1e-9), (lone0, lone1)
        assert term <= plan.delta_bound
    assert plan.delta_bound == split_delta(plan.scale, epsilon, g, most, step, tail)
    assert plan.delta_bound <= delta
    worst = max(exact.values())  # float sums: 1e-9 covers their rounding, not the proof's
    assert worst <= float(plan.delta_bound) * (1 + 1e-9) and plan.delta_bound <= worst * 1.001
    assert plan.delta_bound < plan.noise_delta + plan.lone_delta


EPSILON = Fraction("0.347")
DELTA = Fraction(1, 10**6)


def test_the_calibration_meets_delta_and_keeps_more_than_pipelinedp_at_every_n() -> None:
    """G = 5, ε = 0.347, δ = 1e-6: the maximum over splits of δ₁(m − ℓ) + ℓ·P(Z ≥ τ − w) ≤ δ,
    proved; a key held by n units is kept with probability above PipelineDP's floating-point
    Gaussian at every n from 20 (its probabilities from `bench/bench_selection.py curves`:
    n = 75: 0.0085, 100: 0.0755, 150: 0.679; under δ₁ + δ₂ ours were 0.0078, 0.0732, 0.683;
    Δ-scaling at 150: 0.092), and the choice is the Gaussian. Under substitution the noise
    covers 2G moved keys and τ grows."""
    plan = plan_selection(PrivacyLoss.pure(EPSILON), DELTA, 5, rule=Rule.GAUSSIAN)
    assert plan.noise_delta is not None and plan.delta_bound is not None and plan.scale
    assert plan.threshold is not None and plan.lone_delta is not None
    step = plan.weights[0]
    assert plan.weights == (16,) * 5 and plan.tau() == 131
    _, p = pmf(float(plan.scale), int(40 * math.sqrt(plan.scale)))
    reach = (p.size - 1) // 2
    exact_lone = 5 * math.fsum(p[reach + plan.threshold - step :])  # 5·P(Z ≥ τ − w), summed
    lone = float(plan.lone_delta)
    assert exact_lone * (1 - 1e-12) <= lone <= exact_lone * 1.001  # float summation's error
    assert plan.delta_bound <= DELTA < plan.noise_delta + plan.lone_delta
    assert noise_delta(plan.scale, EPSILON, 5, step) == plan.noise_delta
    pipeline = {20: 3.78e-06, 50: 0.000424, 75: 0.0085, 100: 0.0755, 150: 0.679, 200: 0.991}
    for n, theirs in pipeline.items():
        assert plan.keep_probability(n)[0] > theirs, n
    assert plan.keep_probability(150)[0] == pytest.approx(0.782, abs=1e-3)
    optimal = plan_selection(PrivacyLoss.pure(EPSILON), DELTA, 5, rule=Rule.OPTIMAL)
    assert optimal.keep_probability(150)[0] < 0.1
    assert plan_selection(PrivacyLoss.pure(EPSILON), DELTA, 5).rule is Rule.GAUSSIAN
    swap = plan_selection(
        PrivacyLoss.pure(EPSILON), DELTA, 5, ProtectedChange.SUBSTITUTE, rule=Rule.GAUSSIAN
    )
    assert swap.scale > plan.scale and swap.tau() > plan.tau()
    assert swap.delta_bound is not None and swap.delta_bound <= DELTA


def test_a_pure_gaussian_is_per_key() -> None:
    with pytest.raises(ValueError, match="per_key"):
        plan_selection(
            PrivacyLoss.pure(EPSILON), DELTA, 3, rule=Rule.GAUSSIAN, policy=Policy.WEIGHTED
        )


# --------------------------------------------------------------------------- empirical privacy

AUDIT_EPSILON = Fraction(1, 2)
AUDIT_DELTA = Fraction(1, 100)  # large, so that a break of it is visible in 4·10⁴ draws
G = 3
RELEASES = 40_000
ALPHA = 1e-6  # the audit's total false-alarm rate, split by Bonferroni over its bounds


def kept_counts(plan: SelectionPlan, count: int, seed: int) -> np.ndarray:
    """How many of a unit's G shared keys, each held by `count` units, each release keeps."""
    table = np.zeros((RELEASES * G, G), dtype=np.int64)
    table[:, G - 1] = count
    kept = plan.select(table, NoiseSource.seeded_for_tests(seed)).reshape(RELEASES, G)
    return kept.sum(axis=1)


def joint_violation(plan: SelectionPlan, epsilon: float, delta: float, seed: int) -> float:
    """The largest lower confidence bound, over counts n around τ and the events "at least k
    of the G keys kept" and "at most k" (the likelihood ratio is monotone in how many are kept,
    so these are the worst events), of P(E) − e^ε·P'(E) − δ between n + 1 and n units holding
    each key, both directions. Positive: the (ε, δ) is broken, with confidence."""
    tau = plan.tau(G)
    counts = list(range(max(1, tau - 8), tau + 9))
    kept = {n: kept_counts(plan, n, seed + n) for n in counts}
    events = 2 * (G + 1)
    bonferroni = ALPHA / (2 * events * len(counts))
    worst = -1.0
    for n in counts[:-1]:
        for k, at_least in product(range(G + 1), (True, False)):
            hits = [int(((kept[m] >= k) if at_least else (kept[m] <= k)).sum()) for m in (n, n + 1)]
            for x, y in ((hits[1], hits[0]), (hits[0], hits[1])):
                low = stats.beta.ppf(bonferroni, x, RELEASES - x + 1) if x else 0.0
                high = stats.beta.ppf(1 - bonferroni, y + 1, RELEASES - y) if y < RELEASES else 1.0
                worst = max(worst, float(low - math.exp(epsilon) * high - delta))
    return worst


def test_a_unit_with_g_shared_keys_moves_the_release_by_at_most_epsilon_delta() -> None:
    """The unit's G keys that others hold too: the vector of their decisions moves by (ε, δ₁)
    when it comes or goes (false-alarm rate 1e-6); its lone keys are audited with the other
    rules' (`test_selection_draw.py`)."""
    plan = plan_selection(PrivacyLoss.pure(AUDIT_EPSILON), AUDIT_DELTA, G, rule=Rule.GAUSSIAN)
    assert plan.noise_delta is not None
    assert joint_violation(plan, float(AUDIT_EPSILON), float(plan.noise_delta), seed=301) <= 0


def test_the_joint_audit_catches_too_little_noise() -> None:
    """The same plan drawn at a quarter of its σ² breaks (ε, δ₁) (power check)."""
    plan = plan_selection(PrivacyLoss.pure(AUDIT_EPSILON), AUDIT_DELTA, G, rule=Rule.GAUSSIAN)
    assert plan.scale is not None and plan.noise_delta is not None
    from dprelease.mechanism.noise import exact_sigma2

    broken = SelectionPlan(**{**plan.__dict__, "scale": exact_sigma2(plan.scale / 4)})
    assert joint_violation(broken, float(AUDIT_EPSILON), float(plan.noise_delta), seed=302) > 0


def test_a_pure_release_with_five_keys_per_unit_selects_by_the_gaussian_threshold() -> None:
    """`dp.release` on pandas, a pure scope, units holding five keys: the plan picks the
    Gaussian threshold (its τ is the smaller), keys held by 600 units are released, the 40 keys
    each held by one unit are not, and the manifest states the rule, its weights and its δ."""
    import pandas as pd

    import dprelease as dp

    common = [f"K{i}" for i in range(5)]
    rows = [(person, key) for person in range(600) for key in common]
    rows += [(600 + i, f"Z{i:02d}") for i in range(40)]
    data = pd.DataFrame(rows, columns=["person", "dx"])
    spec = {
        "name": "dx_counts",
        "source": "visits",
        "privacy_unit": "person",
        "max_rows_per_unit": 5,
        "max_groups_per_unit": 5,
        "group_by": [{"column": "dx", "domain": {"select": True, "max_keys_per_unit": 5}}],
        "statistics": [{"kind": "count", "name": "visits"}],
    }
    result = dp.release(data, spec, epsilon=1, selection_delta=1e-6)
    assert sorted(result.table["dx"].to_list()) == common
    (entry,) = result.manifest.selections or []
    assert (entry.mechanism, entry.policy, entry.measure) == (
        "gaussian_threshold",
        "per_key",
        "pure",
    )
    assert entry.weights == [16] * 5 and entry.noise is not None and "σ²" in entry.noise
    assert entry.delta_spent_exact == "1/1000000" and entry.tau < 600
    # δ's two parts (review G1): the shared keys' loss tail with all of a unit's keys shared,
    # and the lone keys' release bound; δ bounds the maximum over splits, below their sum (G6)
    shared, lone = entry.delta_shared_keys, entry.delta_lone_keys
    assert shared is not None and lone is not None
    assert 0 < lone < shared <= 1e-6 < shared + lone
    optimal = plan_selection(PrivacyLoss.pure(EPSILON), DELTA, 5, rule=Rule.OPTIMAL)
    other = selection_entry(optimal, ["dx"])  # the whole δ is the lone keys' there
    assert other.delta_shared_keys is None and other.delta_lone_keys is None


def test_an_unprovable_gaussian_says_the_proof_did_not_close() -> None:
    """ε = 0.01, δ = 1e-12, G = 20 under substitution: a threshold exists in floating point, but
    the proved δ₁ (Birnbaum's lower tail at √s·σ ≈ 23 000) stays above δ (review G7). The
    refusal says so and what to change, not that no threshold exists; the default plan falls
    back to Δ-scaling."""
    loss, delta = PrivacyLoss.pure(Fraction(1, 100)), Fraction(1, 10**12)
    with pytest.raises(ValueError, match="could be proved .* leave the rule to the plan"):
        plan_selection(loss, delta, 20, ProtectedChange.SUBSTITUTE, rule=Rule.GAUSSIAN)
    assert plan_selection(loss, delta, 20, ProtectedChange.SUBSTITUTE).rule is Rule.OPTIMAL
