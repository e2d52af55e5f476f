"""`dprelease plan` says what the rounding base and the reliability rules will do to each value,
before any row is read: its margin after rounding, where each test holds on the released value,
and the truth from which a cell passes it with probability ≥ 97.5%; checked against releases."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import polars as pl
from helpers import draw_release, invoke_cli, make_spec

import dprelease as dp
from dprelease.mechanism.noise import NoiseSource

CELLS = 400
RULES = [
    {"name": "unreliable", "relative_margin_above": 0.3, "action": "flag"},
    {"name": "small", "value_below": 10, "action": "suppress", "apply_to": "row"},
]


def counts_spec(**postprocess: object):
    return make_spec(
        group_by=[{"column": "cell", "domain": {"min": 0, "max": CELLS - 1}}],
        privacy_unit=None, max_rows_per_unit=None,
        statistics=[{"name": "n", "kind": "count"},
                    {"name": "m", "kind": "mean", "column": "y", "lower": 0, "upper": 1}],
        postprocess={"round_to": 5, "rules": RULES, **postprocess},
    )  # fmt: skip


def cells_of(size: int) -> pl.DataFrame:
    """CELLS cells of `size` rows each (the truth of every count)."""
    cell = np.repeat(np.arange(CELLS), size)
    return pl.DataFrame({"cell": cell, "y": np.zeros(cell.size)})


def test_the_plan_states_each_values_rounded_margin_and_its_tests() -> None:
    planned = dp.plan(counts_spec().spec, epsilon=1).publication
    assert planned is not None and planned.round_to == 5
    n, m = planned.values
    assert (n.column, n.moe95, n.moe95_rounded) == ("n", 6.0, 10.0)  # + base − 1
    flag, small = n.tests
    assert (flag.rule, flag.released_below, flag.truth_from) == (
        "unreliable",
        10 / 0.3,
        10 / 0.3 + 10,
    )
    assert (small.rule, small.action, small.apply_to) == ("small", "suppress", "row")
    assert (small.released_below, small.truth_from) == (10, 20)
    # a mean's margin is per cell: its test has no one threshold
    assert (m.moe95, m.moe95_rounded, [t.released_below for t in m.tests]) == (None, None, [None])
    assert dp.plan(counts_spec(round_to=None, rules=None).spec, epsilon=1).publication is None


def test_the_released_margins_and_flags_keep_to_the_plan() -> None:
    """Cells whose truth is the plan's `truth_from` (rounded up) are flagged in at most 4% of
    1,200 (the plan says ≤ 2.5%: above 4% has probability < 0.1% if it holds), cells a margin
    below the threshold in at least 95%; no released margin exceeds the planned one."""
    spec = counts_spec()
    flag = dp.plan(spec.spec, epsilon=1).publication.values[0].tests[0]  # type: ignore[union-attr]
    assert flag.released_below is not None and flag.truth_from is not None
    passing = cells_of(math.ceil(flag.truth_from))
    failing = cells_of(math.floor(flag.released_below - 10))
    flagged = {"passing": 0, "failing": 0}
    for seed in range(3):
        for name, data in (("passing", passing), ("failing", failing)):
            noise = NoiseSource.seeded_for_tests(seed)
            table = draw_release(data, spec, 1, noise=noise).table
            assert table["n_moe95"].max() <= 10
            flagged[name] += int((table["n_flag"] == "u").sum())
    assert flagged["passing"] <= 0.04 * 3 * CELLS
    assert flagged["failing"] >= 0.95 * 3 * CELLS


def test_the_cli_plan_prints_what_publication_does(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "release:\n  name: r\n  source: r\n  statistics:\n    - {name: n, kind: count}\n"
        "  postprocess:\n    round_to: 5\n    rules:\n"
        "      - {value_below: 10, action: suppress}\n"
    )
    result = invoke_cli("plan", "--spec", str(spec), "--epsilon", "1", columns=140)
    assert result.exit_code == 0, result.output
    assert "publication (no ε)" in result.output and "rounding to base 5" in result.output
    row = next(line for line in result.output.splitlines() if "rule_1: suppress" in line)
    assert row.split()[:3] == ["n", "3", "7"] and row.split()[-2:] == ["10", "17"]
