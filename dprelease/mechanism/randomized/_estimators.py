"""Counts from randomized reports: unbiased estimates, their exact variance, 95% margins, and the
projection onto counts that are nonnegative and sum to the cell's respondents.

For each answer v a report either *supports* v or not: k-RR's report is v, OUE's bit v is 1,
OLH's hash maps v to the reported bucket. A respondent whose answer is v supports it with
probability p, any other respondent with probability q, independently of everyone else:

| protocol | p                    | q                                                     |
|----------|----------------------|-------------------------------------------------------|
| k-RR     | e^ε/(e^ε + k − 1)     | 1/(e^ε + k − 1)                                       |
| OUE      | 1/2                  | 1/(1 + e^ε)                                           |
| OLH      | e^ε/(e^ε + g − 1)     | p·c + (1 − c)/(e^ε + g − 1), c = P(two answers collide) |

So the support count C_v of n reports, n_v of which answer v, has mean n_v·p + (n − n_v)·q and
the unbiased estimate is n̂_v = (C_v − n·q)/(p − q), with the exact variance

    Var(n̂_v) = (n_v·p(1 − p) + (n − n_v)·q(1 − q)) / (p − q)².

The margin states 1.96 standard deviations of that variance at the estimate (clipped to
[0, n]): a normal approximation over n independent respondents, whose coverage a test measures.
Everything here is computed from randomized reports only, so it is post-processing: it spends
no ε (PRIVACY.md, "Local DP").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dprelease.mechanism.randomized._randomizers import PRIME, Randomizer

#: Φ⁻¹(0.975): a 95% margin is this many standard deviations.
Z95 = 1.959963984540054


def collision(g: int, modulus: int = PRIME) -> Fraction:
    """P(h(x) = h(x')) for x ≠ x' under h(x) = ((a·x + b) mod P) mod g, a uniform in [1, P), b
    in [0, P): (a·x + b, a·x' + b) mod P is uniform over the P(P − 1) ordered pairs of distinct
    residues, of which those equal mod g are counted here, exactly."""
    m, t = divmod(modulus, g)  # t residue classes mod g have m + 1 members, g − t have m
    same = t * (m + 1) * m + (g - t) * m * (m - 1)
    return Fraction(same, modulus * (modulus - 1))


@dataclass(frozen=True)
class Law:
    """The support probabilities of a randomizer: p for a respondent's own answer, q for any
    other (floats: e^ε is irrational; the sampling itself never uses them)."""

    p: float
    q: float

    @property
    def gap(self) -> float:
        return self.p - self.q


def law_of(randomizer: Randomizer) -> Law:
    """p and q of `randomizer` (see the module docstring)."""
    e = math.exp(randomizer.epsilon)
    if randomizer.mechanism == "krr":
        return Law(e / (e + randomizer.k - 1), 1 / (e + randomizer.k - 1))
    if randomizer.mechanism == "oue":
        return Law(0.5, 1 / (1 + e))
    assert randomizer.g is not None
    p, q_bucket = e / (e + randomizer.g - 1), 1 / (e + randomizer.g - 1)
    c = float(collision(randomizer.g))
    return Law(p, p * c + q_bucket * (1 - c))


def debias(support: np.ndarray, respondents: np.ndarray, law: Law) -> np.ndarray:
    """n̂_v = (C_v − n·q)/(p − q) per cell and answer (`support`: cells × k, `respondents`: n
    per cell)."""
    return (support - respondents[:, None] * law.q) / law.gap


def variance(counts: np.ndarray, respondents: np.ndarray, law: Law) -> np.ndarray:
    """Var(n̂_v) at true counts n_v = `counts` (cells × k) of n = `respondents` per cell."""
    n = respondents[:, None].astype(float)
    spread = counts * law.p * (1 - law.p) + (n - counts) * law.q * (1 - law.q)
    return spread / law.gap**2


def plug_in_variance(estimate: np.ndarray, respondents: np.ndarray, law: Law) -> np.ndarray:
    """The variance at the estimate, clipped to what a count can be ([0, n])."""
    clipped = np.clip(estimate, 0, respondents[:, None])
    return variance(clipped, respondents, law)


def worst_variance(respondents: np.ndarray | int, law: Law) -> np.ndarray | float:
    """The largest variance over every n_v in [0, n] (the formula is linear in n_v): what a
    plan states before any report exists."""
    spread = max(law.p * (1 - law.p), law.q * (1 - law.q))
    return np.asarray(respondents) * spread / law.gap**2


def project(estimate: np.ndarray, respondents: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The Euclidean projection of each cell's estimates onto {x ≥ 0, Σx = n}, and its shift τ
    per cell: the projection is max(x_v − τ, 0) for the τ that makes the sum n (Duchi et al.
    2008). Every projected value moves by at most |τ| from the estimate, or to 0 from below τ,
    so a margin m of the estimate becomes m + |τ| for the projection (`docs/local.md`)."""
    cells, k = estimate.shape
    ordered = -np.sort(-estimate, axis=1)
    partial = np.cumsum(ordered, axis=1) - respondents[:, None]
    ranks = np.arange(1, k + 1)
    fits = ordered - partial / ranks > 0
    last = k - 1 - np.argmax(fits[:, ::-1], axis=1)  # the largest rank that still fits
    tau = partial[np.arange(cells), last] / (last + 1)
    projected = np.maximum(estimate - tau[:, None], 0.0)
    empty = respondents == 0
    projected[empty] = 0.0
    tau[empty] = 0.0
    return projected, tau
