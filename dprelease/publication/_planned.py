"""What publication will do to a release's values, planned before any row is read: each rounded
value's margin after the rounding, and where each reliability rule's test holds.

The plan knows the noise's margins, not the truth, so it states each test as a threshold on the
released value and the truth from which a cell passes the test with probability ≥ 97.5% (the
released value falls below the threshold only where the noise passes its 95% margin, which it
does with probability ≤ 5%, half of it downwards). How many cells that is depends on the data:
the manifest counts them once the release is drawn.
"""

from __future__ import annotations

from dprelease.publication._columns import ValueColumn, value_columns
from dprelease.publication._rules import judged_rules
from dprelease.spec import PublishedAs, ResolvedSpec, Rule
from dprelease.statement import PlannedTest, PlannedValue, PublicationPlan, ReleasePlan


def planned_publication(resolved: ResolvedSpec, planned: ReleasePlan) -> PublicationPlan | None:
    """The plan's `publication` (None: the spec has neither a rounding base nor rules)."""
    post = resolved.spec.postprocess
    if post.round_to is None and not post.rules:
        return None
    margins = {row.name: row.moe95 for row in planned.statistics}
    judged = judged_rules(resolved.spec)
    values = []
    for column in value_columns(resolved.spec):
        moe = _fixed_margin(column, margins[column.statistic])
        rounded = None
        if post.round_to is not None and column.rounds and moe is not None:
            rounded = moe + (post.round_to - 1 if column.counts_rows else post.round_to)
        margin = rounded if rounded is not None else moe
        tests = [_planned_test(j.name, j.rule, margin) for j in judged if column.column in j.tested]
        if rounded is not None or tests:
            values.append(
                PlannedValue(
                    statistic=column.statistic,
                    column=column.column,
                    moe95=moe,
                    moe95_rounded=rounded,
                    tests=tests,
                )
            )
    return PublicationPlan(round_to=post.round_to, values=values)


def _fixed_margin(column: ValueColumn, moe95: float | None) -> float | None:
    """The margin a rule reads, where it is one number for every cell: the noise's, for a
    value with no sampling error (a combined margin, a ratio's or a quantile's interval is per
    cell)."""
    if column.published_as is PublishedAs.RANK or column.combined is not None:
        return None
    return moe95


def _planned_test(name: str, rule: Rule, margin: float | None) -> PlannedTest:
    """Where `rule`'s test holds on a value whose released margin is `margin` (None: per cell):
    value_below c holds below c; relative_margin_above r holds where |value| < margin / r."""
    if rule.value_below is not None:
        below: float | None = rule.value_below
    else:
        assert rule.relative_margin_above is not None
        below = None if margin is None else margin / rule.relative_margin_above
    return PlannedTest(
        rule=name,
        action=rule.action,
        apply_to=rule.apply_to,
        released_below=below,
        truth_from=None if below is None or margin is None else below + margin,
    )
