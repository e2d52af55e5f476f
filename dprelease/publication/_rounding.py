"""Unbiased controlled rounding to a base (5, 10, 100): every released count and sum to an
adjacent multiple of the base, every released margin still the sum of its rounded cells.

The table is a flow. Margins that form at most two nested chains (the spec refuses more; e.g.
[region, district] ⊂ [region] ⊂ [] and [age]) make a network (the incidence matrix of two laminar
families is a network matrix): each chain is a tree of its margins' rows (a row points to the
row of the next coarser margin holding it, the coarsest to a root), the first chain's arcs point
up, the second's down, a cell is an arc from its finest row of the second chain to its finest
row of the first, and one arc joins the two roots. Every arc carries the sum of its cells, and
flow is conserved at every node: a consistent table is a circulation (Cox 1987, "A constructive
procedure for unbiased controlled rounding", JASA 82, for two-way tables).

In units of the base, each arc's flow x lies between ⌊x⌋ and ⌈x⌉. While an arc is fractional, a
cycle of fractional arcs exists (a node with only one would have a fractional net flow), and
pushing t around it keeps every node balanced. Push +α (till the first arc reaches a bound
forward) with probability β/(α + β), else −β: the expected change is 0, so every value stays
unbiased (E[rounded] = unrounded), and at least one more arc becomes a multiple of the base. At
the end every cell and margin is a multiple of the base within one base of where it was, and each
margin is the sum of its cells. The coin is an exact uniform integer from the release's noise
source (`UniformIntegers`), never numpy's generator.

Values are exact decimals (a published count or sum is a multiple of its place), so the walk
runs in Python integers: no float can leave a margin one unit off. A release without margins
rounds each value on its own, up with probability (its remainder ÷ the base). Everything here
reads only the released values and public structure: it is post-processing, at no ε.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

import numpy as np

from dprelease.mechanism.noise import UniformIntegers
from dprelease.spec import Levels


@dataclass(frozen=True)
class BaseRounded:
    """Rounded values (value units, table order), the most any value moved, and whether every
    margin still sums its cells."""

    values: list[Decimal]
    max_move: Decimal
    additive: bool


def round_to_base(
    values: Sequence[float | int],
    base: int,
    levels: Levels | None,
    uniform: UniformIntegers,
) -> BaseRounded:
    """`values` (one statistic's column: the cells, then each margin's rows, as in the released
    table with margins) rounded to multiples of `base`, unbiased and, with `levels`, controlled.

    Each value moves by less than `base`: by at most base − g, g the greatest common divisor of
    the base and every value (1 for counts; the base itself for values already its multiples,
    which stay). With margins whose released values are not the sums of their cells (not a table
    dprelease releases) each value is rounded on its own and `additive` is False."""
    exact = [Decimal(repr(float(v))) if isinstance(v, float) else Decimal(int(v)) for v in values]
    exponents = [int(d.as_tuple().exponent) for d in exact]  # finite: counts and sums
    scale = max((-e for e in exponents if e < 0), default=0)
    unit = 10**scale  # every value is an integer number of 1/unit
    units = [int(d * unit) for d in exact]
    step = base * unit
    common = math.gcd(step, *units)  # every value, rounded or not, is a multiple of it
    move = Decimal(step - common) / unit
    if levels is None or len(levels.sizes) == 1:
        return BaseRounded(_independent(units, step, uniform, unit), move, True)
    cells = units[: levels.n_cells]
    sums = [np.zeros(size, dtype=object) for size in levels.sizes[1:]]
    for k, index in enumerate(levels.index[1:]):
        for i, row in enumerate(index):
            sums[k][row] += cells[i]
    stated = np.array(units[levels.n_cells :], dtype=object)
    if not np.array_equal(np.concatenate(sums), stated):
        return BaseRounded(_independent(units, step, uniform, unit), move, False)
    rounded = _controlled(cells, levels, step, uniform)
    totals = [rounded]
    for index, size in zip(levels.index[1:], levels.sizes[1:], strict=True):
        row_sums = [0] * size
        for i, row in enumerate(index):
            row_sums[row] += rounded[i]
        totals.append(row_sums)
    return BaseRounded([Decimal(v) / unit for level in totals for v in level], move, True)


def _independent(units: list[int], step: int, uniform: UniformIntegers, unit: int) -> list[Decimal]:
    """Each value alone: down to q·step, or up with probability r/step (unbiased)."""
    out = []
    draws = uniform.array_below(step, len(units)) if step <= 2**63 else None
    for i, x in enumerate(units):
        q, r = divmod(x, step)
        u = int(draws[i]) if draws is not None else uniform.below(step)
        out.append(Decimal((q + (u < r)) * step) / unit)
    return out


def chains(levels: Levels) -> tuple[list[int], list[int]]:
    """The margins (levels 1..) split into two chains, each nested (coarsest first); ValueError
    when no split exists (three mutually crossed margins, which the spec refuses)."""
    margins = list(range(1, len(levels.sizes)))
    sets = {k: frozenset(levels.columns[k]) for k in margins}
    for mask in range(1 << len(margins)):
        parts: tuple[list[int], list[int]] = ([], [])
        for bit, k in enumerate(margins):
            parts[(mask >> bit) & 1].append(k)
        if all(
            sets[a] <= sets[b] or sets[b] <= sets[a]
            for part in parts
            for a, b in itertools.combinations(part, 2)
        ):
            return (
                sorted(parts[0], key=lambda k: len(sets[k])),
                sorted(parts[1], key=lambda k: len(sets[k])),
            )
    raise ValueError("margins cross in three or more directions: no controlled rounding")


class _Network:
    """The table as a circulation: nodes (two roots, then every margin row of the two chains)
    and arcs (the cells first, then every margin row, then the arc between the roots)."""

    def __init__(self, levels: Levels) -> None:
        first, second = chains(levels)
        self.node_of: dict[tuple[int, int], int] = {}  # (level, row) → node; roots are 0 and 1
        self.tail: list[int] = []
        self.head: list[int] = []
        self.level_arcs: dict[int, int] = {}  # level → its first margin arc
        for k in (*first, *second):
            for row in range(levels.sizes[k]):
                self.node_of[(k, row)] = 2 + len(self.node_of)
        for i in range(levels.n_cells):  # a cell: from its second-chain row to its first-chain row
            self.tail.append(self._node(levels, second, i, 1))
            self.head.append(self._node(levels, first, i, 0))
        for side, chain in enumerate((first, second)):
            for position, k in enumerate(chain):
                self.level_arcs[k] = len(self.tail)
                parent_of = np.zeros(levels.sizes[k], dtype=np.int64)
                coarser = chain[position - 1] if position else None
                for i, row in enumerate(levels.index[k]):
                    if coarser is None:
                        parent_of[row] = side  # the chain's root
                    else:
                        parent_of[row] = self.node_of[(coarser, int(levels.index[coarser][i]))]
                for row in range(levels.sizes[k]):
                    node, parent = self.node_of[(k, row)], int(parent_of[row])
                    self.tail.append(node if side == 0 else parent)
                    self.head.append(parent if side == 0 else node)
        self.free = len(self.tail)  # the arc between the roots: the grand total, unbounded
        self.tail.append(0)
        self.head.append(1)

    def _node(self, levels: Levels, chain: list[int], cell: int, root: int) -> int:
        if not chain:
            return root
        k = chain[-1]
        return self.node_of[(k, int(levels.index[k][cell]))]


def _controlled(cells: list[int], levels: Levels, step: int, uniform: UniformIntegers) -> list[int]:
    """The cells rounded to multiples of `step` so that every margin row and the grand total
    end at an adjacent multiple, by Cox's unbiased walk (module docstring)."""
    net = _Network(levels)
    n_cells = levels.n_cells
    flow: list[int] = list(cells)
    for k in sorted(net.level_arcs, key=net.level_arcs.__getitem__):
        sums = [0] * levels.sizes[k]
        for i, row in enumerate(levels.index[k]):
            sums[row] += cells[i]
        flow.extend(sums)
    flow.append(sum(cells))
    lo = [f - f % step for f in flow]
    adjacency: dict[int, set[int]] = {}
    fractional = 0
    for arc, f in enumerate(flow):
        if arc == net.free or f % step:
            fractional += arc != net.free
            adjacency.setdefault(net.tail[arc], set()).add(arc)
            adjacency.setdefault(net.head[arc], set()).add(arc)

    def remove(arc: int) -> None:
        for node in (net.tail[arc], net.head[arc]):
            adjacency[node].discard(arc)

    def prune() -> None:
        """Drop dead ends: a node with one movable arc (only the free arc can be one)."""
        stack = [node for node, arcs in adjacency.items() if len(arcs) == 1]
        while stack:
            node = stack.pop()
            if len(adjacency[node]) != 1:
                continue
            (arc,) = adjacency[node]
            if arc != net.free:
                raise RuntimeError("internal: the table is not a circulation")
            remove(arc)
            stack.extend(n for n in (net.tail[arc], net.head[arc]) if len(adjacency[n]) == 1)

    prune()
    while fractional:
        start = next(node for node, arcs in adjacency.items() if arcs)
        cycle = _cycle(start, adjacency, net)
        forward_room = min(
            (lo[a] + step - flow[a]) if ahead else (flow[a] - lo[a])
            for a, ahead in cycle
            if a != net.free
        )
        backward_room = min(
            (flow[a] - lo[a]) if ahead else (lo[a] + step - flow[a])
            for a, ahead in cycle
            if a != net.free
        )
        total = forward_room + backward_room
        push = forward_room if uniform.below(total) < backward_room else -backward_room
        for arc, ahead in cycle:
            flow[arc] += push if ahead else -push
            if arc != net.free and flow[arc] % step == 0:
                fractional -= 1
                remove(arc)
        prune()
    return flow[:n_cells]


def _cycle(start: int, adjacency: dict[int, set[int]], net: _Network) -> list[tuple[int, bool]]:
    """A cycle of movable arcs through the walk from `start`: (arc, traversed tail → head)."""
    seen = {start: 0}
    path: list[tuple[int, bool]] = []
    node, came = start, -1
    while True:
        arc = next(a for a in adjacency[node] if a != came)
        ahead = net.tail[arc] == node
        path.append((arc, ahead))
        node, came = (net.head[arc] if ahead else net.tail[arc]), arc
        if node in seen:
            return path[seen[node] :]
        seen[node] = len(path)
