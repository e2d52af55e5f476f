"""Exact 95% margins of error of a consistent table: the quantile of each released value's error.

A released value's error is a known linear combination of the independent integer noise draws of
every level, discrete Laplace or discrete Gaussian (`moe95` says how its distribution is
inverted). Everything depends only on public parameters (the levels and the noise laws), so the
margins of error are stated before any budget is spent, in the manifest and in `dprelease plan`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import scipy.sparse as sp  # type: ignore[import-untyped]  # typed only with scipy-stubs
from scipy.optimize import minimize_scalar  # type: ignore[import-untyped]

from dprelease.mechanism.margins._consistency import (
    Woodbury,
    cell_signatures,
    checked,
    column_blocks,
)
from dprelease.mechanism.noise import FAMILIES, NoiseFamily, NoiseLaw
from dprelease.spec import Levels

# Margin-of-error numerics (see `moe95`).
_MOE_TOL = 2e-3  # smoothing width τ, relative to the error's scale
_SMOOTH_Z = 6.0  # the smoothing bracket: P(|τ·N(0,1)| > 6τ) = 2.0e-9
_TAIL = 1e-16  # Chernoff bound on the mass that the periodised distribution folds back
_DAMP = 9.0  # cf samples stop where the smoothing factor is exp(−81/2) < 3e-18
_GRID = 8  # the 95% point is bracketed to τ/_GRID
# Terms of an error whose fourth cumulants add up to at most _FOLD·Var(E)² become one normal
# term; the probability error this makes (Edgeworth order, ≈ 0.12·_FOLD) is in _FOLD_ERROR.
_FOLD = 1e-4
_FOLD_ERROR = 2e-5
_LAW_STRIDE = 1 << 42  # (law, κ units) packed in one int64: units ≤ 1/_QUANTUM < 2**40
# Coefficients of one error are quantized to 1e-12 of the largest |coefficient| in the call, so
# identical patterns share one margin-of-error computation.
_QUANTUM = 1e-12


#: The noise families in the order an error's terms are added up.
FAMILIES_ORDER = list(FAMILIES.values())


class _Laws:
    """The float numerics of the distinct noise laws of one `moe95` call, by law index: the
    variance and fourth cumulant of Z, and sums of log characteristic and moment generating
    functions over the terms of an error, each family vectorising over its own laws
    (`noise.NoiseFamily`)."""

    def __init__(self, laws: Sequence[NoiseLaw]) -> None:
        self.laws = list(laws)
        self.parameter = np.array([float(law.parameter) for law in laws])  # b, or σ²
        # a law of `parties` shares is the sum of that many iid draws: its cumulants, log cf
        # and log mgf are that many times one draw's
        self.parties = np.array([law.parties for law in laws], dtype=np.int64)
        families = [law.family for law in laws]
        self.lattice = np.array([not family.cumulant_sees_lattice for family in families])
        self.var_z = np.empty(len(laws))
        self.k4_z = np.empty(len(laws))
        for family, members in self._by_family(np.arange(len(laws))):
            exact = [laws[int(i)].parameter for i in members]
            var_z, k4_z = family.cumulants(exact)
            self.var_z[members] = var_z * self.parties[members]
            self.k4_z[members] = k4_z * self.parties[members]

    def _by_family(self, law: np.ndarray) -> list[tuple[NoiseFamily, np.ndarray]]:
        """The positions of `law` (law indices) drawn from each family, families in order."""
        of = np.array([FAMILIES_ORDER.index(self.laws[int(g)].family) for g in law], dtype=int)
        return [
            (family, np.flatnonzero(of == k))
            for k, family in enumerate(FAMILIES_ORDER)
            if (of == k).any()
        ]

    def log_cf(self, law: int, s: np.ndarray) -> np.ndarray:
        """log E e^{isZ} of law `law` (real: every law is symmetric)."""
        one = self.laws[law]
        return one.parties * one.family.log_cf(one.parameter, s)

    def log_mgf(
        self, law: np.ndarray, kappa: np.ndarray, counts: np.ndarray
    ) -> Callable[[float], float]:
        """λ ↦ Σ_g counts_g · log E e^{λκ_g Z_g} over the terms g: finite below `lambda_max`."""
        exact = [law.parameter for law in self.laws]
        draws = counts * self.parties[law]
        parts = [
            part
            for family, at in self._by_family(law)
            for part in family.log_mgf_parts(exact, law[at], kappa[at], draws[at])
        ]

        def total(lam: float) -> float:
            value = 0.0
            for part in parts:
                value += part(lam)
            return value

        return total

    def lambda_max(self, law: np.ndarray, kappa: np.ndarray) -> float:
        """Where Σ log E e^{λκZ} ends: the smallest of its families' ends (inf: everywhere
        finite)."""
        ends = [
            family.lambda_max(self.parameter[law[at]], kappa[at])
            for family, at in self._by_family(law)
        ]
        return min(ends, default=math.inf)

    def variance_proxy(self, law: np.ndarray, kappa: np.ndarray, counts: np.ndarray) -> float:
        """A subgaussian variance proxy of the error when every term's law is subgaussian (its
        moment generating function finite everywhere)."""
        value = 0.0
        draws = counts * self.parties[law]
        for family, at in self._by_family(law):
            value += family.variance_proxy(self.parameter[law[at]], kappa[at], draws[at])
        return value


def _abs_quantile95(
    laws: _Laws, law: np.ndarray, kappa: np.ndarray, counts: np.ndarray, normal_var: float
) -> float:
    """A conservative 95% quantile of |E|, E = N(0, normal_var) + Σ_g κ_g·(sum of counts_g iid
    draws of law_g), about 6τ above the exact one (at most 12.2τ); see `moe95`."""
    var = float(np.sum(counts * kappa**2 * laws.var_z[law])) + normal_var
    tau = _MOE_TOL * max(math.sqrt(var), float(kappa.max()))
    smooth = tau**2 + normal_var  # both enter as one normal term
    folding = _FOLD_ERROR if normal_var > 0 else 0.0  # nothing folded, nothing to allow for
    target = 0.95 + math.erfc(_SMOOTH_Z / math.sqrt(2.0)) + _TAIL + folding + 1e-12
    x_hi = 1.01 * math.sqrt((var + tau**2) / (1.0 - target))  # Chebyshev: F(x_hi) ≥ target
    # Chernoff: P(|E + τN| ≥ a) ≤ 2 exp(−λa + Σ log M(λκ) + λ²·smooth/2) ≤ _TAIL, best λ.
    lam_max = laws.lambda_max(law, kappa)
    if math.isinf(lam_max):  # discrete Gaussian and normal terms only: subgaussian with variance
        # proxy V, so P(|E + τN| ≥ a) ≤ 2 exp(−a²/(2V)), which is _TAIL at a = √(2V log(2/_TAIL))
        proxy = laws.variance_proxy(law, kappa, counts) + smooth
        tail = math.sqrt(2.0 * proxy * math.log(2.0 / _TAIL))
    else:
        log_mgf = laws.log_mgf(law, kappa, counts)

        def tail_point(lam: float) -> float:
            return (log_mgf(lam) + 0.5 * lam**2 * smooth + math.log(2.0 / _TAIL)) / lam

        best = minimize_scalar(  # λ as a fraction of lam_max: the search's tolerance is relative
            lambda f: tail_point(f * lam_max), bounds=(1e-6, 0.999), method="bounded"
        )
        tail = float(best.fun)
    period = max(tail + x_hi, 2.0 * x_hi)
    dt = 2.0 * math.pi / period
    # |ψ(t)| ≤ e^{−smooth·t²/2} (every other factor is a characteristic function): the samples
    # stop where that is below e^{−_DAMP²/2}, sooner than τ alone allows when terms were folded.
    t = dt * np.arange(1, math.ceil(_DAMP / (math.sqrt(smooth) * dt)) + 1)
    log_psi = -0.5 * smooth * t**2
    for g, k, n in zip(law, kappa, counts, strict=True):
        log_psi += n * laws.log_cf(int(g), k * t)
    weights = np.exp(log_psi) / t

    def mass(x: float) -> float:  # P(|E + τN| ≤ x) folded with period `period` (Poisson)
        return dt / math.pi * (x + 2.0 * float(weights @ np.sin(t * x)))

    # First on the grid x_m = m·period/M, all at once: t_j·x_m = 2πjm/M, so Σ_j w_j sin(t_j x_m)
    # = −Im (DFT of w)_m, M the power of two ≥ 2·samples + 2; then bisection, to τ/_GRID.
    size = 1 << (2 * t.size + 1).bit_length()
    padded = np.zeros(size)
    padded[1 : t.size + 1] = weights
    grid = np.arange(size // 2 + 1) * (period / size)
    on_grid = dt / math.pi * (grid - 2.0 * np.fft.rfft(padded).imag)
    below = grid < x_hi
    passing = np.flatnonzero((on_grid >= target) & below)
    if passing.size:  # mass(0) = 0, so passing[0] ≥ 1
        lo, hi = float(grid[passing[0] - 1]), float(grid[passing[0]])
    else:  # x_hi passes (Chebyshev)
        lo, hi = float(grid[below][-1]), x_hi
    while hi - lo > tau / _GRID:
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if mass(mid) >= target else (mid, hi)
    return hi + _SMOOTH_Z * tau


def _pattern(
    kappa: np.ndarray, law: np.ndarray, counts: np.ndarray, quantum: float, laws: _Laws
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
    term_var = merged * kap**2 * laws.var_z[pairs[:, 0]]
    term_k4 = merged * kap**4 * laws.k4_z[pairs[:, 0]]
    # A discrete Gaussian term whose lattice the sampled characteristic function would see
    # (κ·t_max > π/2, t_max = _DAMP/τ ≤ _DAMP/(_MOE_TOL·sd(E))) always stays exact.
    tau_low = _MOE_TOL * math.sqrt(float(term_var.sum()))
    visible = laws.lattice[pairs[:, 0]] & (kap * _DAMP > 0.5 * math.pi * tau_low)
    candidates = np.flatnonzero(~visible)
    order = candidates[np.argsort(term_k4[candidates], kind="stable")]
    folded = np.cumsum(term_k4[order]) <= _FOLD * term_var.sum() ** 2
    if folded.size:
        folded[-1] = False  # the least normal candidate always stays exact
    main = np.sort(np.concatenate([order[~folded], np.flatnonzero(visible)]))
    normal_var = float(f"{term_var[order[folded]].sum():.10g}")
    key = np.column_stack([pairs[main], merged[main]]).tobytes() + repr(normal_var).encode()
    return key, pairs[main], merged[main], normal_var


def moe95(levels: Levels, noise: Sequence[NoiseLaw]) -> tuple[np.ndarray, ...]:
    """95% margin of error of every released value of `consistent`, per level (value units).

    What it is. A released value's error is E = Σ_j c_j Z_j: a known linear combination of the
    independent integer draws Z_j of every level, each discrete Laplace or discrete Gaussian
    (`NoiseLaw`; coefficients from M⁻¹, times each level's granularity). The margin of error h is
    a 95% quantile of |E|: P(|E| ≤ h) ≥ 0.95.

    How. Draws with equal coefficient and law are merged (cells of one signature share their
    coefficient), so E = Σ_g κ_g S_g with S_g a sum of n_g iid draws. The terms closest to
    normal (small ones, and sums of many draws) are replaced by one normal term of the same
    variance, as many as keep their summed fourth cumulant below 1e-4·Var(E)²: the two agree in
    their first three moments, so probabilities move at the next (Edgeworth) order, by about
    0.12·1e-4, allowed for as 2e-5 below (when anything was folded). A discrete Gaussian's
    fourth cumulant says nothing of its lattice (it is below 1e-15·σ⁴ from σ² = 3 on), so a
    Gaussian term is a candidate only where the inversion cannot see its lattice:
    κ·9/τ_E ≤ π/2, τ_E = 2e-3·sd(E) ≤ τ below, so every sampled κt lies in the central half of
    its characteristic function's period, where the images are at most e^{−π²σ²} of it.
    Identical patterns are computed once.

    The characteristic function of E is the product of closed-form ones (`noise._gaussian_law` for
    the Gaussian's). E has atoms, so it is smoothed: E' = E + τN(0,1), τ = 2e-3·max(sd(E), max
    κ). P(|E'| ≤ x) is read off the characteristic function by the trapezoid rule, which by
    Poisson summation is exact for the distribution folded with period P. P is chosen by a
    Chernoff bound so the folded-back mass is below 1e-16: the exponent Σ_g n_g log E e^{λκ_g
    Z_g} + λ²s²/2 − λa (s² = τ² + the folded variance) is finite for λ < 1/max(κ_g b_g) over the
    discrete Laplace terms, which bound λ (E e^{uZ} of a discrete Gaussian is finite for every
    u: `noise._gaussian_law`); with discrete Gaussian and normal terms only, E' is subgaussian
    (E e^{uZ} ≤ e^{u²σ²/2}) with variance proxy V = Σ_g n_g κ_g²σ_g² + s², and a = √(2V
    log(2e16)) in closed form. The samples stop where |ψ(t)| ≤ e^{−s²t²/2} is below 3e-18. The
    mass is computed on a whole grid of x at once by one FFT of the samples (t_j·x_m = 2πjm/M),
    and the first grid point that reaches 0.95 + 2.0e-9 + 1e-16 + 2e-5 + 1e-12 is refined by
    bisection to x within τ/8 above the crossing; h = x + 6τ. As |E' − E| ≤ 6τ except with
    probability 2.0e-9, P(|E| ≤ h) ≥ 0.95 (the Chebyshev point, which always passes, bounds the
    search).

    How far above the exact quantile q: h − q ≤ 6τ + τ/8 + (q' − q), q' the quantile of E'
    (plus ~0.1τ for the 2e-5). For an error whose law is smooth on the scale of τ (any mix of
    many draws) q' − q = O(τ²/sd), so h is about 6.2τ ≈ 1.25% of max(sd(E), max κ) above q; for
    a lattice-like error whose 95% point is the edge of an atom, q' can be up to 6τ above q,
    and h up to 12.2τ ≈ 2.4%. One case is coarser: with folded terms, when P(|E| ≤ q) falls
    within 2e-5 above 0.95, h can reach the next atom.

    A single level (no margins) releases granularity·Z itself: its margin of error is the exact
    one, granularity × the smallest integer h with P(|Z| ≤ h) ≥ 0.95, as without margins.

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
    distinct = sorted(set(noise))
    law_id = np.array([distinct.index(law) for law in noise])
    laws = _Laws(distinct)
    gran = np.array([float(law.granularity) for law in noise])
    if len(levels.sizes) == 1:
        return (np.full(levels.n_cells, noise[0].moe95),)
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
        key, pairs, merged, normal_var = _pattern(kappa, term_law, n, quantum, laws)
        if key not in cache:
            cache[key] = _abs_quantile95(
                laws, pairs[:, 0], pairs[:, 1] * quantum, merged, normal_var
            )
        result[i] = cache[key]
    ends = np.cumsum(levels.sizes[1:]) + d
    margins = np.split(result[d:], ends[:-1] - d)
    return (result[:d][inverse], *margins)
