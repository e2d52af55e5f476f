"""Exact 95% margins of error of a consistent table: the quantile of each released value's error.

A released value's error is a known linear combination of the independent integer discrete Laplace
draws of every level (`moe95` says how its distribution is inverted). Everything depends only on
public parameters (the levels and the noise laws), so the margins of error are stated before any
budget is spent, in the manifest and in `dprelease plan`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp  # type: ignore[import-untyped]  # typed only with scipy-stubs
from scipy.optimize import brentq, minimize_scalar  # type: ignore[import-untyped]

from dprelease.mechanism._consistency import (
    NoiseLaw,
    Woodbury,
    cell_signatures,
    checked,
    column_blocks,
)
from dprelease.spec import Levels

# Margin-of-error numerics (see `moe95`).
_MOE_TOL = 2e-3  # smoothing width τ, relative to the error's scale
_SMOOTH_Z = 6.0  # the smoothing bracket: P(|τ·N(0,1)| > 6τ) = 2.0e-9
_TAIL = 1e-16  # Chernoff bound on the mass that the periodised distribution folds back
_DAMP = 9.0  # cf samples stop where the smoothing factor is exp(−81/2) < 3e-18
# Terms of an error whose fourth cumulants add up to at most _FOLD·Var(E)² become one normal
# term; the probability error this makes (Edgeworth order, ≈ 0.12·_FOLD) is in _FOLD_ERROR.
_FOLD = 1e-4
_FOLD_ERROR = 2e-5
_LAW_STRIDE = 1 << 42  # (law, κ units) packed in one int64: units ≤ 1/_QUANTUM < 2**40
# Coefficients of one error are quantized to 1e-12 of the largest |coefficient| in the call, so
# identical patterns share one margin-of-error computation.
_QUANTUM = 1e-12


def _var_z(scales: np.ndarray) -> np.ndarray:
    """Var Z = 2q/(1 − q)², q = e^{−1/b}, for discrete Laplace at each scale."""
    return 2.0 * np.exp(-1.0 / scales) / np.expm1(-1.0 / scales) ** 2


def _log_cf(scale: float, s: np.ndarray) -> np.ndarray:
    """log of the discrete Laplace characteristic function at s: (1−q)²/(1 − 2q cos s + q²),
    q = e^{−1/b}, written as −log1p(4q sin²(s/2)/(1−q)²) (positive, stable for huge b)."""
    q = math.exp(-1.0 / scale)
    one_minus_q = -math.expm1(-1.0 / scale)
    return -np.log1p(4.0 * q * np.sin(s / 2.0) ** 2 / one_minus_q**2)


def _log_mgf(scales: np.ndarray, u: np.ndarray) -> np.ndarray:
    """log E e^{uZ} for discrete Laplace Z at each scale, |u| < 1/scale."""
    inv = 1.0 / scales
    return 2.0 * np.log(-np.expm1(-inv)) - np.log(-np.expm1(u - inv)) - np.log(-np.expm1(-u - inv))


def _abs_quantile95(
    scales: np.ndarray, kappa: np.ndarray, counts: np.ndarray, normal_var: float
) -> float:
    """A conservative 95% quantile of |E|, E = N(0, normal_var) + Σ_g κ_g·(sum of counts_g iid
    discrete Laplace at scales_g), at most about 8τ above the exact one; see `moe95`."""
    var = float(np.sum(counts * kappa**2 * _var_z(scales))) + normal_var
    tau = _MOE_TOL * max(math.sqrt(var), float(kappa.max()))
    smooth = tau**2 + normal_var  # both enter as one normal term
    target = 0.95 + math.erfc(_SMOOTH_Z / math.sqrt(2.0)) + _TAIL + _FOLD_ERROR + 1e-12
    x_hi = 1.01 * math.sqrt((var + tau**2) / (1.0 - target))  # Chebyshev: F(x_hi) ≥ target
    # Chernoff: P(|E + τN| ≥ a) ≤ 2 exp(−λa + Σ log M(λκ) + λ²·smooth/2) ≤ _TAIL, best λ.
    lam_max = 1.0 / float(np.max(kappa * scales))

    def tail_point(lam: float) -> float:
        log_m = float(np.sum(counts * _log_mgf(scales, lam * kappa)))
        return (log_m + 0.5 * lam**2 * smooth + math.log(2.0 / _TAIL)) / lam

    best = minimize_scalar(tail_point, bounds=(1e-6 * lam_max, 0.999 * lam_max), method="bounded")
    period = max(float(best.fun) + x_hi, 2.0 * x_hi)
    dt = 2.0 * math.pi / period
    t = dt * np.arange(1, math.ceil(_DAMP / (tau * dt)) + 1)
    log_psi = -0.5 * smooth * t**2
    for scale, k, n in zip(scales, kappa, counts, strict=True):
        log_psi += n * _log_cf(float(scale), k * t)
    weights = np.exp(log_psi) / t

    def mass(x: float) -> float:  # P(|E + τN| ≤ x) folded with period `period` (Poisson)
        return dt / math.pi * (x + 2.0 * float(weights @ np.sin(t * x)))

    xtol = tau / 8.0
    root = brentq(lambda x: mass(x) - target, 0.0, x_hi, xtol=xtol)
    return root + xtol + _SMOOTH_Z * tau


def _k4_z(scales: np.ndarray) -> np.ndarray:
    """Fourth cumulant of discrete Laplace Z (a difference of two geometrics):
    2q(1 + 4q + q²)/(1 − q)⁴."""
    q = np.exp(-1.0 / scales)
    return 2.0 * q * (1.0 + 4.0 * q + q**2) / np.expm1(-1.0 / scales) ** 4


def _pattern(
    kappa: np.ndarray, law: np.ndarray, counts: np.ndarray, quantum: float, scales: np.ndarray
) -> tuple[bytes, np.ndarray, np.ndarray, float]:
    """Merge equal (law, |κ|) terms of one error and fold the most normal-like of them into one
    normal term (see `moe95`). Returns (key, [law, κ units] rows, counts, normal variance);
    equal keys are equal distributions."""
    units = np.rint(kappa / quantum).astype(np.int64)
    keep = (units > 0) & (counts > 0)
    code, where = np.unique(law[keep] * _LAW_STRIDE + units[keep], return_inverse=True)
    pairs = np.column_stack([code // _LAW_STRIDE, code % _LAW_STRIDE])
    merged = np.bincount(where.reshape(-1), weights=counts[keep]).astype(np.int64)
    kap = pairs[:, 1] * quantum
    term_var = merged * kap**2 * _var_z(scales[pairs[:, 0]])
    term_k4 = merged * kap**4 * _k4_z(scales[pairs[:, 0]])
    order = np.argsort(term_k4, kind="stable")
    folded = np.cumsum(term_k4[order]) <= _FOLD * term_var.sum() ** 2
    folded[-1] = False  # the least normal term always stays exact
    main = np.sort(order[~folded])
    normal_var = float(f"{term_var[order[folded]].sum():.10g}")
    key = np.column_stack([pairs[main], merged[main]]).tobytes() + repr(normal_var).encode()
    return key, pairs[main], merged[main], normal_var


def moe95(levels: Levels, noise: Sequence[NoiseLaw]) -> tuple[np.ndarray, ...]:
    """95% margin of error of every released value of `consistent`, per level (value units).

    What it is. A released value's error is E = Σ_j c_j Z_j: a known linear combination of the
    independent integer discrete Laplace draws of every level (coefficients from M⁻¹, times each
    level's granularity). The margin of error h is a 95% quantile of |E|: P(|E| ≤ h) ≥ 0.95.

    How. Draws with equal coefficient and law are merged (cells of one signature share their
    coefficient), so E = Σ_g κ_g S_g with S_g a sum of n_g iid draws. The terms closest to
    normal (small ones, and sums of many draws) are replaced by one normal term of the same
    variance, as many as keep their summed fourth cumulant below 1e-4·Var(E)²: the two agree in
    their first three moments, so probabilities move at the next (Edgeworth) order, by about
    0.12·1e-4, allowed for as 2e-5 below. Identical patterns are computed once. The
    characteristic function of E is the product of closed-form ones. E has atoms, so it is
    smoothed: E' = E + τN(0,1), τ = 2e-3·max(sd(E), max κ). P(|E'| ≤ x) is read off the
    characteristic function by the trapezoid rule, which by Poisson summation is exact for the
    distribution folded with period P; P is chosen by a Chernoff bound so the folded-back mass
    is below 1e-16, and the samples stop where the smoothing factor is below 3e-18. x is the
    root of P(|E'| ≤ x) = 0.95 + 2.0e-9 + 1e-16 + 2e-5 + 1e-12 (brentq, to τ/8) and
    h = x + τ/8 + 6τ: as |E' − E| ≤ 6τ except with probability 2.0e-9, P(|E| ≤ h) ≥ 0.95, and h
    is at most about 8τ (1.6% of max(sd(E), max κ)) above the exact quantile.

    Cost: one inversion per distinct pattern (one per distinct region size, say, for a
    hierarchy; for crossed margins on a joint domain up to one per signature), after
    O(signatures × (signatures + margin rows)) work to build the patterns.

    Nonlinear outputs. `consistent_nonnegative` has no such exact law. The projection onto
    x ≥ 0 cannot move the cells further from the truth in the M-norm (the truth is feasible),
    but that bounds no single value: reported with these (linear) margins of error, cells are
    over-covered and aggregates of sparse tables under-covered (81% for the grand total of an
    all-zero table; see `consistent_nonnegative`), so publish that caveat with them.
    `round_additive` moves each value by less than its level's `max_shift`: use
    `rounded_moe95`, which keeps the 95% guarantee for counts.
    """
    _, variances = checked(levels, None, noise)
    laws = sorted(set(noise), key=lambda law: (law.scale, law.granularity))
    law_id = np.array([laws.index(law) for law in noise])
    law_scale = np.array([float(law.scale) for law in laws])
    gran = np.array([float(law.granularity) for law in noise])
    if len(levels.sizes) == 1:
        h = _abs_quantile95(law_scale[law_id[:1]], gran[:1], np.array([1]), 0.0)
        return (np.full(levels.n_cells, h),)
    wb = Woodbury(levels, variances)
    signatures, inverse, counts = cell_signatures(levels)
    d = signatures.shape[0]
    # Patterns: one cell per signature (columns 0..d-1), then every margin row (d..d+K-1).
    rhs = sp.hstack([wb.signature_columns(signatures), wb.q]).tocsc()
    sig_rows = signatures + wb.offsets  # for each signature, its K-index in every margin
    margin_law = np.repeat(law_id[1:], levels.sizes[1:])
    margin_gran = np.repeat(gran[1:], levels.sizes[1:])
    term_law = np.concatenate([np.full(d + 1, law_id[0]), margin_law])
    terms: list[tuple[np.ndarray, np.ndarray]] = []  # per pattern: |κ| and counts
    for block in column_blocks(rhs.shape[1], max(wb.k, d)):
        w = rhs[:, block].toarray()
        v = wb.solve(w)
        # (U v)_s for every signature s: the part of every cell's coefficient shared by its
        # signature; a cell's coefficient on its own finest noise is a_s − (U v)_s.
        uv = v[sig_rows].sum(axis=1)  # D × block
        margin_coef = np.abs(w - wb.q @ v) / wb.ratio[:, None] * margin_gran[:, None]
        for col, pattern in enumerate(range(block.start, block.stop)):
            if pattern < d:  # a cell of signature `pattern`: its own draw is a separate term
                coef = -uv[:, col]
                cell_n = counts.copy()
                cell_n[pattern] -= 1
                cell_coef = np.concatenate([coef, [1.0 + coef[pattern]]])
                cell_n = np.concatenate([cell_n, [1]])
            else:  # margin row r (of the margin whose rows start at offsets[level - 1])
                r = pattern - d
                level = int(np.searchsorted(wb.offsets, r, side="right"))
                inside = signatures[:, level - 1] == r - wb.offsets[level - 1]
                cell_coef = np.concatenate([inside - uv[:, col], [0.0]])
                cell_n = np.concatenate([counts, [0]])
            terms.append(
                (
                    np.concatenate([np.abs(cell_coef) * gran[0], margin_coef[:, col]]),
                    np.concatenate([cell_n, np.ones(wb.k, dtype=np.int64)]),
                )
            )
    quantum = _QUANTUM * max(float(kappa.max()) for kappa, _ in terms)
    cache: dict[bytes, float] = {}
    result = np.empty(len(terms))
    for i, (kappa, n) in enumerate(terms):
        key, pairs, merged, normal_var = _pattern(kappa, term_law, n, quantum, law_scale)
        if key not in cache:
            cache[key] = _abs_quantile95(
                law_scale[pairs[:, 0]], pairs[:, 1] * quantum, merged, normal_var
            )
        result[i] = cache[key]
    ends = np.cumsum(levels.sizes[1:]) + d
    margins = np.split(result[d:], ends[:-1] - d)
    return (result[:d][inverse], *margins)
