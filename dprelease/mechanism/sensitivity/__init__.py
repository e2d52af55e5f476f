"""Sensitivity: how far one privacy unit's change can move a noisy vector, from the protected
change and the declared bounds alone, never from data.

Every bound starts from `change.reach` (the rows one unit's change moves, from R, G, R_g as the
engines enforce them): L1 for Laplace noise (`count_sensitivity`, `sum_sensitivity`, per level),
L2 for Gaussian noise (`level_l2`), each with its derivation in words for the manifest; and
before discretization, for targets and the planner (`sensitivity_bound`,
`sensitivity_squared_bound`).
"""

from dprelease.mechanism.sensitivity._bounds import sensitivity_bound, sensitivity_squared_bound
from dprelease.mechanism.sensitivity._l1 import (
    count_sensitivity,
    l1_reach,
    rows_reach,
    sum_sensitivity,
)
from dprelease.mechanism.sensitivity._l2 import contribution, l2_squared, level_l2

__all__ = [
    "contribution",
    "count_sensitivity",
    "l1_reach",
    "l2_squared",
    "level_l2",
    "rows_reach",
    "sensitivity_bound",
    "sensitivity_squared_bound",
    "sum_sensitivity",
]
