"""A consortium release's public parameters, decided from the consortium file, the spec and the
period alone — the same at every site and at the aggregator, before any row is read.

The noise (PRIVACY.md, "Consortium releases", states the proof): each of the m sites adds an
exact N_Z(0, σ_s²) share to each cell of each measurement; the decrypted total carries their sum.
Against a coalition of the key holder, the aggregator's view and up to t sites, the noise the
coalition cannot subtract is the sum of n = m − t honest shares, and by Kairouz, Liu & Steinke
2021 (Proposition 14; Theorem 1 gives its first and third bounds) that sum added to a vector
query with ‖Δ‖₂ ≤ Δ2, ‖Δ‖₁ ≤ Δ1 over d cells satisfies, for every α ≥ 1,

    D_α ≤ α·(Δ2²/(2nσ_s²) + extra),  extra = min( τd,  Δ1·τ/√(nσ_s²) + τ²d/2,
                                                    τ·√(d·Δ2²/(nσ_s²)) + τ²d/2 ),
    τ = 10 · Σ_{k=1}^{n−1} exp(−2π²σ_s²·k/(k+1)),

i.e. it is (Δ2²/(2nσ_s²) + extra)-zCDP (each of KLS's three bounds is linear in α or linear
plus a constant, which α ≥ 1 absorbs). With n = 1 it is the discrete Gaussian's own Δ2²/(2σ²).
σ_s² is the smallest on a fine grid above Δ2²/(2ρn) for which that is at most the measurement's
share of ρ, compared exactly (the float τ is rounded up first). A person in up to k sites
(`max_sites_per_unit`) moves the pooled vector by up to k times one site's Δ: Δ1·k, Δ2²·k².
With margins every level of a measurement is its own vector (its rows d, its Δ and its part of
the measurement's ρ, exactly as the central release splits it), with its own σ_s²; the levels
compose as they do centrally (their ρ add up to the measurement's). A margin row is the exact
sum of its cells' rows, so the bound on pooled totals below holds for it too.

Exactness of the encrypted sum: every plaintext is a residue modulo the first j of the key's
60-bit primes, and the decrypted total is read in (−P/2, P/2). The engines sum in Int128 and
bound any input below 2^63 rows, each adding at most U integer units (1 for a count of rows,
max(|lower|, |upper|) in units for a sum); a share adds an int64 noise draw. So every pooled
total is below m·2^63·(U + 1) in magnitude, and j is the fewest primes whose product exceeds
twice that: for every input the engines accept, decoding is exact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from dprelease.change import ProtectedChange, choose_change
from dprelease.consortium._central import (
    Allocation,
    CentralMeasurement,
    PooledLaw,
    central_allocation,
    central_measurements,
    pooled_allocation,
    unsupported,
)
from dprelease.consortium._config import Consortium
from dprelease.consortium._errors import ConsortiumError
from dprelease.ledger import make_release_id
from dprelease.mechanism.noise import exact_sigma2
from dprelease.period import Period
from dprelease.spec import ResolvedSpec, missing_writer, period_of

#: The engines' bound on rows: fewer than 2^63 (an Int128 sum of them cannot overflow).
MAX_ROWS = 1 << 63
#: Grid of candidate share variances: base·(1 + j/2^20), so the search never adds more than a
#: relative 2^-20 of noise beyond what the bound needs.
_GRID = 1 << 20
#: The smallest share variance of a sum of several shares (σ ≥ 1/2, as KLS 2021 assume).
_SMALLEST_SHARE = Fraction(1, 4)


def kls_extra(
    share_sigma2: float, honest: int, delta1: int, delta2_squared: int, cells: int
) -> Fraction:
    """What the sum of `honest` discrete Gaussian shares costs beyond a continuous Gaussian of
    the same variance (the `extra` of the module docstring), rounded up: exact and positive
    even where the float τ would underflow to 0 (then τd with τ bounded by a power of two)."""
    if honest == 1:
        return Fraction(0)
    exponent = math.pi**2 * share_sigma2  # each term of τ is ≤ exp(−2π²σ²·k/(k+1)) ≤ e^−π²σ²
    if exponent > 700:  # exp underflows: τ ≤ 10(n−1)·2^−⌊π²σ²/ln 2⌋, exactly, and extra ≤ τd
        bits = min(math.floor(exponent / math.log(2) * (1 - 1e-9)) - 1, 2048)  # any fewer: above
        return Fraction(10 * (honest - 1) * cells, 1 << bits)
    tau = 10 * math.fsum(
        math.exp(-2 * math.pi**2 * share_sigma2 * k / (k + 1)) for k in range(1, honest)
    )
    tau *= 1 + 1e-9  # float rounding of exp and the sum, upward
    total = honest * share_sigma2
    extra = min(
        tau * cells,
        delta1 * tau / math.sqrt(total) + tau * tau * cells / 2,
        tau * math.sqrt(cells * delta2_squared / total) + tau * tau * cells / 2,
    )
    return Fraction(extra * (1 + 1e-9))


def kls_rho(
    share_sigma2: Fraction, honest: int, delta1: int, delta2_squared: int, cells: int
) -> Fraction:
    """The ρ of the sum of `honest` N_Z(0, share_sigma2) shares (exact Gaussian part, plus
    `extra` as an exact rational above it)."""
    gaussian = Fraction(delta2_squared) / (2 * honest * share_sigma2)
    return gaussian + kls_extra(float(share_sigma2), honest, delta1, delta2_squared, cells)


def share_sigma2(
    rho: Fraction, honest: int, delta1: int, delta2_squared: int, cells: int
) -> Fraction:
    """The smallest share σ² (as the sampler draws it) of the grid base·(1 + j/2^20), base =
    Δ2²/(2ρn) (at least 1/4 when n > 1), whose `kls_rho` is at most ρ."""
    base = Fraction(delta2_squared) / (2 * rho * honest)
    if honest > 1:  # KLS state the bound for shares with σ ≥ 1/2: never below it
        base = max(base, _SMALLEST_SHARE)

    def fits(j: int) -> bool:
        candidate = exact_sigma2(base * (1 + Fraction(j, _GRID)))
        return kls_rho(candidate, honest, delta1, delta2_squared, cells) <= rho

    if fits(0):
        return exact_sigma2(base)
    high = 1
    while not fits(high):
        high *= 2
        if high > _GRID << 20:
            raise ConsortiumError("consortium.rho", "no share variance meets ρ; raise ρ")
    low = high // 2
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if fits(middle) else (middle, high)
    return exact_sigma2(base * (1 + Fraction(high, _GRID)))


@dataclass(frozen=True)
class ShareNoise:
    """One noisy vector's share of the noise (a measurement's cells, or one of its margins: a
    release with margins measures every level, each with its own part of the measurement's ρ,
    as a central release does): its rows, its consortium Δ, its ρ, each site's σ²."""

    name: str
    cells: int
    delta1: int
    delta2_squared: int
    rho: Fraction
    sigma2: Fraction
    units_bound: int  # U: the most one row adds to a cell, in integer units
    level: int = 0  # 0: the cells; k: the measurement's k-th margin
    label: str | None = None  # a margin's key columns ("total" for the grand total)

    def public_fact(self) -> dict[str, object]:
        """What every share and sum states of this vector (a margin says which)."""
        fact: dict[str, object] = {"name": self.name, "cells": self.cells}
        if self.label is not None:
            fact["level"] = self.label
        return {**fact, "share_sigma2": str(self.sigma2)}


@dataclass(frozen=True)
class Plan:
    """Everything public about one consortium release (see the module docstring)."""

    consortium: Consortium
    resolved: ResolvedSpec
    period: Period | None
    release_id: str
    change: ProtectedChange
    allocation: Allocation  # the central one (its σ² are not the consortium's)
    noise: tuple[ShareNoise, ...]

    @property
    def length(self) -> int:
        """Integers in one share: every measurement's cells (and margins' rows), one after
        another."""
        return sum(n.cells for n in self.noise)

    def by_measurement(self, values: dict[str, list[int]]) -> dict[str, list[list[int]]]:
        """The decrypted totals of each measurement (its levels one after another, as the key
        holder writes them) split into its levels."""
        split: dict[str, list[list[int]]] = {}
        at: dict[str, int] = {}
        for n in self.noise:
            start = at.get(n.name, 0)
            split.setdefault(n.name, []).append(values[n.name][start : start + n.cells])
            at[n.name] = start + n.cells
        return split

    def moduli_needed(self, primes: tuple[int, ...], name: str) -> int:
        """How many of the key's primes make the encrypted sum exact (see the module docstring);
        ShareError naming the key if even all of them cannot."""
        units = max(n.units_bound for n in self.noise)
        bound = len(self.consortium.sites) * MAX_ROWS * (units + 1)
        product = 1
        for count, prime in enumerate(primes, start=1):
            product *= prime
            if product > 2 * bound:
                return count
        raise ConsortiumError(
            name,
            f"its plaintext moduli cannot hold a total of {len(self.consortium.sites)} sites "
            "exactly; choose a coarser granularity or narrower bounds",
        )

    def public_facts(self) -> dict[str, object]:
        """What every share and sum of this release states, so one of another is refused."""
        return {
            **self.consortium.public_facts(),
            "release_id": self.release_id,
            "spec_hash": self.resolved.hash,
            "period": None if self.period is None else str(self.period),
            "neighbours": self.change.value,
            "measurements": [n.public_fact() for n in self.noise],
        }

    def pooled(self, parties: int) -> Allocation:
        """The allocation as the release states it: each measurement's noise, at every level,
        the sum of `parties` shares, its Δ the consortium's."""
        k = self.consortium.max_sites_per_unit
        laws: dict[str, list[PooledLaw]] = {}
        for n, m in zip(
            self.noise, central_measurements(self.resolved, self.allocation), strict=True
        ):
            laws.setdefault(n.name, []).append(
                PooledLaw(
                    share_sigma2=n.sigma2,
                    parties=parties,
                    delta1_units=n.delta1,
                    delta2_squared_units=n.delta2_squared,
                    derivation=_derivation(m, k),
                )
            )
        return pooled_allocation(self.allocation, laws)


def _derivation(m: CentralMeasurement, k: int) -> str:
    if k == 1:
        return m.derivation + "; a person in one site only (max_sites_per_unit: 1)"
    return (
        f"{m.derivation}; × {k} for a person in up to {k} sites (max_sites_per_unit: {k}), "
        f"so Δ2² × {k * k}"
    )


def plan_release(consortium: Consortium, resolved: ResolvedSpec, period: str | None) -> Plan:
    """The public parameters of the consortium's release of `resolved` for `period`; every
    refusal (a one-line typed error naming the field) comes from public inputs only."""
    try:
        change = choose_change(resolved.spec.neighbours, consortium.neighbours)
    except ValueError as exc:
        raise ConsortiumError("consortium.neighbours", str(exc)) from None
    month = period_of(resolved.spec.period, period)
    shown = None if month is None else str(month)
    allocation = central_allocation(resolved, consortium.rho, change)
    if (problem := unsupported(resolved, allocation)) is not None:
        raise ConsortiumError(*problem)
    formats = None if resolved.publish is None else resolved.publish.formats
    if formats is not None and (problem_text := missing_writer(formats)) is not None:
        raise ConsortiumError("publish.formats", problem_text)
    k = consortium.max_sites_per_unit
    noise = []
    for m in central_measurements(resolved, allocation):  # each level of each measurement
        delta1, delta2_squared = m.delta1 * k, m.delta2_squared * k * k
        sigma2 = share_sigma2(m.rho, consortium.honest, delta1, delta2_squared, m.cells)
        noise.append(
            ShareNoise(
                m.name,
                m.cells,
                delta1,
                delta2_squared,
                m.rho,
                sigma2,
                m.units_bound,
                m.level,
                m.label,
            )
        )
    release_id = make_release_id(resolved.spec.name, shown)
    return Plan(consortium, resolved, month, release_id, change, allocation, tuple(noise))
