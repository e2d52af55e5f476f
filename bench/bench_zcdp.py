"""Pure ε or zCDP? The 95% margin of error of a count under each, at the same odds statement.

For an odds risk profile the scope's whole budget is either ε_min (pure ε-DP, Laplace noise,
the odds statement always holds) or ρ_max at δ (ρ-zCDP, Gaussian noise, the statement holds with
probability ≥ 1 − δ). When m measurements share it equally, each count (Δ1 = Δ2 = Δ) gets
Laplace noise at scale Δ·m/ε_min or Gaussian noise with σ² = Δ²·m/(2ρ_max): the Laplace margin
grows like m, the Gaussian one like √m. This prints, with the exact discrete margins the
manifest states (not the continuous approximations):

- per profile, the margin of a count (Δ = 1) for m = 1, 3, 12, 36, 100 and the crossover m*
  from which zCDP's margin is smaller;
- the demo's monthly scope (`hospital_patients`, its visits count with Δ = 4, 12 months × 3
  statistics = 36 measurements) and the same spec in a 100-measurement scope, through the
  planner (`dp.plan(..., compare=True)`), as a release would state them.

    .venv/bin/python bench/bench_zcdp.py [--delta 1e-9]
"""

from __future__ import annotations

import argparse
from fractions import Fraction
from pathlib import Path

from dprelease.budget import (
    ConstantProfile,
    PiecewiseLinearProfile,
    cap_from_profile,
    choose_budget_for,
)
from dprelease.loss import Measure
from dprelease.mechanism.noise import exact_scale, exact_sigma2, gaussian_moe95, laplace_moe95

ROOT = Path(__file__).resolve().parent.parent
PROFILES = {
    "demo visits (B_min = 3000)": PiecewiseLinearProfile([[0, 20000], [1, 3000], [10, 20000]]),
    "paper's case-control (B_min = 2)": PiecewiseLinearProfile([[0, 10], [1, 2], [10, 5]]),
    "constant B = 5": ConstantProfile(5),
}
SHOWN = (1, 3, 12, 36, 100)


def caps(profile: object, delta: float) -> tuple[Fraction, Fraction]:
    """The scope's whole budget under each measure, unrounded (resolution 10⁻¹²)."""
    pure = cap_from_profile(choose_budget_for(profile))  # type: ignore[arg-type]
    zcdp = cap_from_profile(
        choose_budget_for(profile, measure=Measure.ZCDP, delta=delta)  # type: ignore[arg-type]
    )
    return pure, zcdp


def margins(epsilon: Fraction, rho: Fraction, m: int, delta_1: int = 1) -> tuple[int, int]:
    """95% margins of a count with Δ = `delta_1` as one of m measurements: Laplace, Gaussian."""
    laplace = laplace_moe95(exact_scale(Fraction(delta_1 * m) / epsilon))
    gaussian = gaussian_moe95(exact_sigma2(Fraction(delta_1 * delta_1 * m) / (2 * rho)))
    return laplace, gaussian


def crossover(epsilon: Fraction, rho: Fraction, delta_1: int = 1, limit: int = 10_000) -> int:
    """The smallest m from which the Gaussian margin stays strictly below the Laplace one."""
    last_not = 0
    for m in range(1, limit + 1):
        laplace, gaussian = margins(epsilon, rho, m, delta_1)
        if gaussian >= laplace:
            last_not = m
        elif m - last_not > 50:  # past every tie near the crossover
            break
    return last_not + 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delta", type=float, default=1e-9)
    args = parser.parse_args()
    delta = args.delta
    print(f"δ = {delta:g}, add/remove neighbours, counts with Δ = 1\n")
    header = " | ".join(f"m = {m}" for m in SHOWN)
    print(f"| profile | ε_min | ρ_max | {header} | crossover m* |")
    print("|---|---:|---:|" + "---:|" * len(SHOWN) + "---:|")
    for name, profile in PROFILES.items():
        epsilon, rho = caps(profile, delta)
        cells = " | ".join("{} / {}".format(*margins(epsilon, rho, m)) for m in SHOWN)
        print(
            f"| {name} | {float(epsilon):.4g} | {float(rho):.4g} | {cells} | "
            f"{crossover(epsilon, rho)} |"
        )
    print("\n(cells: Laplace / Gaussian 95% margin, in counts)\n")

    import dprelease as dp

    spec = ROOT / "pipelines" / "specs" / "visits_monthly.yaml"
    privacy = ROOT / "pipelines" / "privacy.yaml"
    print("The demo's monthly spec (3 statistics a month), its scope's profile, as planned:")
    print("| scope | measurements | visits ± pure ε | visits ± zCDP | total_cost ± pure ε | "
          "total_cost ± zCDP | smaller |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---|")
    for releases in (12, 100 // 3):
        comparison = dp.plan(
            spec, privacy=privacy, compare=True, releases=releases, delta=delta
        ).comparison
        assert comparison is not None
        rows = {row.name: row for row in comparison.statistics}
        visits, cost = rows["visits"], rows["total_cost"]
        print(
            f"| hospital_patients, {releases} releases | {3 * releases} | "
            f"{visits.pure_moe95:g} | {visits.zcdp_moe95:g} | {cost.pure_moe95:,.0f} | "
            f"{cost.zcdp_moe95:,.0f} | {comparison.smaller} |"
        )
    epsilon, rho = caps(PROFILES["demo visits (B_min = 3000)"], delta)
    print(
        f"\ncrossover for the demo's visits count (Δ = 4): m* = {crossover(epsilon, rho, 4)} "
        f"measurements; with ρ_max rounded down as the demo's profile rounds "
        f"(rounding: 0.05), {crossover(Fraction(4), Fraction(3, 20), 4)}"
    )


if __name__ == "__main__":
    main()
