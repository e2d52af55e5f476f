"""What a scope has spent: the one definition, used by `reserve` (to refuse) and `status`.

Reserved and committed charges count; voided ones do not. An open reservation counts as spent
until it is committed or voided (fail safe: its noise may be drawn at any moment). Sums are exact
rationals, so no rounding can let the total pass the cap.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from fractions import Fraction

from sqlalchemy import Connection, func, select

from dprelease.ledger.records import Composition
from dprelease.ledger.schema import charges

COUNTED_STATUSES = ("reserved", "committed")


@dataclass(frozen=True)
class Spending:
    """The charges of one scope, summed per period."""

    composition: Composition
    by_period: dict[str | None, Fraction] = field(default_factory=dict)

    def spent(self, period: str | None = None) -> Fraction:
        """Sequential: everything. Parallel: that period's, or the worst period's if none given.

        Parallel composition lets each period spend the full cap (its people are disjoint), so
        a parallel scope's overall spending is its most-spent period.
        """
        if self.composition == "sequential":
            return sum(self.by_period.values(), Fraction(0))
        if period is not None:
            return self.by_period.get(period, Fraction(0))
        return max(self.by_period.values(), default=Fraction(0))


def spending(conn: Connection, compositions: dict[str, Composition]) -> dict[str, Spending]:
    """Spending of each named scope (keys of `compositions`), in the caller's transaction."""
    # Exact sums in Python; grouping first keeps it cheap (releases reuse a few ε values).
    rows = conn.execute(
        select(charges.c.scope, charges.c.period, charges.c.epsilon, func.count())
        .where(charges.c.scope.in_(list(compositions)))
        .where(charges.c.status.in_(COUNTED_STATUSES))
        .group_by(charges.c.scope, charges.c.period, charges.c.epsilon)
    ).all()
    totals: dict[str, dict[str | None, Fraction]] = defaultdict(dict)
    for scope, period, epsilon, count in rows:
        per = totals[scope]
        per[period] = per.get(period, Fraction(0)) + Fraction(epsilon) * count
    return {
        name: Spending(composition, dict(sorted(totals[name].items(), key=_period_order)))
        for name, composition in compositions.items()
    }


def _period_order(item: tuple[str | None, Fraction]) -> str:
    return "" if item[0] is None else item[0]
