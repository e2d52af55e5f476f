"""Key selection: releasing the group keys that many units hold, when the key list is not public.

A key is released only if enough distinct privacy units hold it, decided by a DP mechanism on the
count (or weight) of units per key: the optimal per-key rule of Desfontaines et al. 2022 in pure
scopes, discrete Gaussian thresholding in zCDP scopes (discrete Laplace thresholding on request);
for units that hold up to G keys, per-key budget splitting or a weighted policy, and in pure
scopes a discrete Gaussian threshold with a proved (ε, δ) when its τ is the smaller
(`_gaussian_pure`). The released key
set is itself a DP output; a key held by one unit is released with probability at most δ, which
the ledger charges and the odds statement accounts for (PRIVACY.md).

    plan = plan_selection(PrivacyLoss.pure(Fraction(1, 10)), Fraction(1, 10**9))
    plan.tau(), plan.keep_table()              # what the planner shows, without data
    keep = plan.select(units_per_key, source)  # units_per_key[k, g − 1]: units holding k and g keys

Everything random is exact (the project's samplers and NoiseSource bits); every δ is proved with
rigorous interval arithmetic (`_real`), never a float that could round a δ below what is spent.
"""

from dprelease.mechanism.selection._aggregate import (
    UNITS,
    released_keys,
    units_per_key,
    units_table,
)
from dprelease.mechanism.selection._optimal import KeepTable, keep_table
from dprelease.mechanism.selection._plan import (
    TABLE_COUNTS,
    Policy,
    Rule,
    SelectionPlan,
    default_policy,
    l1_weights,
    l2_weights,
    moved_keys,
    plan_for_domain,
    plan_selection,
)
from dprelease.mechanism.selection._statement import (
    KEYS_ARE_DP,
    KeepRow,
    SelectionEntry,
    SelectionReport,
    missing_delta,
    plan_report,
    selection_entry,
)

__all__ = [
    "KEYS_ARE_DP",
    "KeepRow",
    "SelectionEntry",
    "SelectionReport",
    "missing_delta",
    "plan_report",
    "selection_entry",
    "TABLE_COUNTS",
    "KeepTable",
    "Policy",
    "Rule",
    "SelectionPlan",
    "default_policy",
    "keep_table",
    "l1_weights",
    "l2_weights",
    "moved_keys",
    "plan_for_domain",
    "plan_selection",
    "released_keys",
    "units_per_key",
    "units_table",
    "UNITS",
]
