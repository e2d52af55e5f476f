"""Everything the local path borrows from the central machinery, in this one module.

The randomizers, their exact sampling and the estimators are `mechanism.randomized`'s; a
release of randomized answers is a central release (`kind: randomized`). Here: the bits of a
`NoiseSource` for the randomizers, and the margin a central count states (for the planner).
"""

from __future__ import annotations

from fractions import Fraction

from dprelease.mechanism.noise import NoiseSource, laplace_moe95, laplace_variance
from dprelease.mechanism.randomized import byte_reader

__all__ = ["NoiseSource", "byte_reader", "central_count_accuracy"]


def central_count_accuracy(epsilon: Fraction) -> tuple[float, int]:
    """The standard deviation and 95% margin of a count the central path releases at ε (exact
    discrete Laplace noise of scale 1/ε: one person changes one count by one)."""
    scale = 1 / epsilon
    return laplace_variance(scale) ** 0.5, laplace_moe95(scale)
