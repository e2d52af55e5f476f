"""Exact DP quantiles of a bounded column, per cell of the key grid, each with a 95% interval.

What goes in: per cell, the histogram of the column's clamped values on a public grid of B
points (`QuantileGrid`: lower, lower + resolution, …, upper), as the engine counts it after
bounding each unit's contribution. What comes out: for each requested p, a released grid point
per cell and an interval of grid points that holds the cell's true p-quantile (the grid point
of rank ⌈p·n⌉) with probability ≥ 95%. docs/quantiles.md has the measurements behind each
choice; in short:

* **Values: permute-and-flip** (McKenna & Sheldon 2020) over the grid with the score
  S(k) = max(0, #{x < k} − p·n + 1/(2d), p·n − #{x ≤ k}) for p = a/d: how many ranks p·n
  lies from grid point k's ranks, the open end #{x < k} counting 1/(2d) rank away. It is 0 at
  the grid point of rank ⌈p·n⌉ alone, however many rows tie there, so the documented target is
  the best point on any data. (OpenDP's |#{x < c} + p·#{x = c} − p·n|, and the ½·#{x = k}
  this project used before, are not: on heaped data a block of ties that straddles p·n puts
  their minimum on a neighbour.) One row moves it by at most max(p, 1 − p) rank, as it moves
  n by one and #{x < k}, #{x ≤ k} by one or none. Permute-and-flip is never worse than the
  exponential mechanism and needs only Bernoulli(exp(−(S − S_min)/scale)) coins. A coin is
  [G ≥ S − S_min] with G geometric, P(G ≥ s) = exp(−s/scale), taken from one exact discrete
  Laplace draw (G = Z for Z ≥ 0, −Z − 1 otherwise), so every grid point costs one draw
  whatever the data. Flipping every coin at once and taking a uniform heads-up point is
  exactly permute-and-flip: the first heads of a uniformly random order is uniform among the
  heads.
* **Several p's: one level at a time.** The middle p is released first over the whole grid;
  the p's below it then choose only among grid points up to it, the p's above only among points
  from it, and so on (as in Kaplan, Schnapp & Stemmer 2022). A row then moves its own p's
  scores fully but another p's only by p/max(p, 1 − p) or (1 − p)/max(p, 1 − p), as all of
  that p's points lie on one side of it, so a level costs less than its p's added up
  (`level_costs`), and the values are monotone in p.
  The score keeps the global target p·n, so no p inherits another's error as bias.
* **Intervals: one noisy ladder.** A value says nothing about how many rows lie near it, so an
  honest interval in the column's units needs a measurement. After the values, every cell's
  grid is cut into blocks that double in width away from each released value; the block counts
  get exact discrete Laplace noise (one row moves one block: L1 sensitivity = rows moved) from
  a share of ε (`interval_share`). The noisy cumulative counts then bound where rank p·n lies:
  a Chernoff bound on the summed noise, union-bounded over the cuts, makes each side miss with
  probability ≤ 2.5%. The interval is widened to be monotone in p, which keeps its coverage,
  and a value outside its interval is moved to its nearest end, which can only bring it closer
  to a quantile the interval holds. All of it is post-processing of the ladder and the values.

* **Weighted: the same mechanism on weight mass.** A survey-weighted quantile's histograms hold
  each row's weight, clamped to [0, W] and rounded to a public step, as an integer number of
  steps (≤ `mass_per_row`); n, #{x < k} and #{x ≤ k} become sums of steps and every Δ is the
  row's times `mass_per_row`, so the scores stay integers and the draws stay exact. With one
  step a row it is the unweighted mechanism, plan and draws alike.

Privacy: one unit's change moves `rows_moved` rows (removed plus added, over all cells); the
values cost `value_epsilon` in total and the ladder `interval_epsilon`. Everything is integer
arithmetic on counts; random bits come only from the NoiseSource, and how many are drawn
depends only on the number of cells and the plan (but for a redraw of probability < 2^-43 in a
uniform choice).
"""

from dprelease.mechanism.quantiles._plan import (
    DEFAULT_INTERVAL_SHARE,
    QuantileGrid,
    QuantilePlan,
    plan_quantiles,
)
from dprelease.mechanism.quantiles._release import (
    QuantileRelease,
    release_observed_quantiles,
    release_quantiles,
)

__all__ = [
    "DEFAULT_INTERVAL_SHARE",
    "QuantileGrid",
    "QuantilePlan",
    "QuantileRelease",
    "plan_quantiles",
    "release_observed_quantiles",
    "release_quantiles",
]
