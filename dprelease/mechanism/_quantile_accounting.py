"""Accounting of a quantile statistic: its share of ε, the rows one unit moves, the score
sensitivity of each p and the ladder's, and the exact plan (`mechanism.quantiles`) that a
release draws and the manifest states. Public settings only, never data.

A quantile sees where rows are, not only how many: a unit's change moves its kept rows between
grid points, so a substitution moves 2R rows (R removed, R added) even in an ungrouped release,
where a count's Δ would stay R. Every p's value and the ladder compose sequentially within the
statistic (`QuantilePlan`), and the statistic composes sequentially with the release's others.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from dprelease.change import ProtectedChange
from dprelease.errors import SpecError
from dprelease.loss import PrivacyLoss, laplace_epsilon
from dprelease.mechanism.quantiles import QuantileGrid, QuantilePlan, plan_quantiles
from dprelease.spec import QuantileStatistic, ReleaseSpec, exact_decimal

#: The ladder's share of a quantile statistic's ε, by how many p's it releases. A lone p gains
#: nothing from the level order, so every bit of ε its interval takes is lost to its value
#: (docs/quantiles.md measures the trade against OpenDP); several p's share one ladder and the
#: level order gives each more than an even split, which pays for a tenth.
INTERVAL_SHARE_ONE_P = Fraction(1, 40)
INTERVAL_SHARE_SEVERAL_PS = Fraction(1, 10)


def interval_share(count: int) -> Fraction:
    """The ladder's share of ε for a statistic of `count` p's (see the constants), unless the
    statistic sets its own `interval_share`."""
    return INTERVAL_SHARE_ONE_P if count == 1 else INTERVAL_SHARE_SEVERAL_PS


@dataclass(frozen=True)
class QuantileAllocation:
    """How a quantile statistic is made: its grid, its loss (its share of the release's, in
    the release's measure) and the exact plan of its values and intervals at `plan.epsilon`,
    with the derivation of every sensitivity the manifest states."""

    statistic: QuantileStatistic
    loss: PrivacyLoss
    grid: QuantileGrid
    plan: QuantilePlan
    derivation: str

    @property
    def epsilon(self) -> Fraction:
        """The ε of its share (a pure release; ValueError in a zCDP one, as for any share)."""
        return self.loss.epsilon


#: Where a substituted unit's added rows may land in a quantile's histograms.
_ON_THE_GRID = "elsewhere on the grid (a quantile sees where rows are, so also without groups)"


def allocate_quantile(
    stat: QuantileStatistic,
    share: PrivacyLoss,
    spec: ReleaseSpec,
    neighbours: ProtectedChange,
    path: str,
) -> QuantileAllocation:
    """The plan of `stat` at its `share` of the release's loss; SpecError naming `path` for an
    ε too small for the sampler."""
    epsilon = laplace_epsilon(share)  # in a zCDP release, as for Laplace noise there
    grid = QuantileGrid.from_bounds(stat.lower_exact, stat.upper_exact, stat.resolution_exact)
    moved, why = spec.unit_bounds.reach(neighbours, _ON_THE_GRID)
    try:
        plan = plan_quantiles(
            list(stat.ps),
            epsilon,
            grid.bins,
            spec.rows_per_unit,
            neighbours,
            interval_share=interval_share(len(stat.ps))
            if stat.interval_share is None
            else exact_decimal(stat.interval_share, "interval_share"),
        )
    except SpecError as exc:
        raise SpecError(f"{path}.{exc.path}", exc.message) from None
    scores = ", ".join(
        f"p = {float(p):g}: {float(max(p, 1 - p)):g} rank per row → Δ = "
        f"{float(max(p, 1 - p)) * moved:g} rank"
        for p in plan.ps
    )
    derivation = (
        f"quantile: {why} → {moved} row(s) moved over the cells' histograms. Values "
        f"(permute-and-flip, coin scale 2Δ/ε_p): one row moves a p's score "
        f"|#{{x < k}} + ½·#{{x = k}} − p·n| by at most max(p, 1 − p) rank; {scores}. "
        f"Intervals (ladder of block counts, discrete Laplace): one row moves one block by 1 → "
        f"L1 Δ = {moved}"
    )
    return QuantileAllocation(stat, share, grid, plan, derivation)
