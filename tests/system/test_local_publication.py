"""A release of randomized answers published as a central one is: counts of respondents as
integers (with margins, every margin row the sum of its rounded cells) and shares rounded to the
place their margin leaves, each margin widened by what the rounding may move its value; and the
shares are value columns of `postprocess:` (flags, suppression, `apply_to: row`) as a central
share is, through `dp.release` on pandas and `dprelease release`."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import polars as pl
from helpers import invoke_cli
from test_local_release import brute_force_support, reports, spec, write_spec

import dprelease as dp
from dprelease.mechanism.randomized import Z95, debias, law_of, plug_in_variance

ANSWERS = ["never", "once", "monthly", "weekly"]


def test_counts_are_integers_and_margins_hold_what_the_rounding_moved() -> None:
    """Without the projection or margins, each count is its unbiased estimate (C − n·q)/(p − q)
    rounded to the nearest integer (before: the float itself, 15 significant digits), and its
    margin ⌈h + 1⌉ − 1 holds, for an integer truth, the estimate's margin h plus the move; each
    share is rounded to
    the place of its margin's second significant digit, its margin widened by half that place."""
    frame = reports(n=2_000)
    local = spec(project=False)
    table = dp.release(frame.to_pandas(), local).table
    randomizer = dp.local.load(local).wave.randomizer
    law = law_of(randomizer)
    support = brute_force_support(frame, dp.local.load(local))
    for row, region in enumerate(("n", "s")):
        answered = frame.filter((pl.col("region") == region) & pl.col("drug_use").is_not_null())
        n = np.array([answered.height])
        estimate = debias(np.array([support[region]], dtype=float), n, law)[0]
        moe = Z95 * np.sqrt(plug_in_variance(estimate[None, :], n, law))[0]
        for j, answer in enumerate(ANSWERS):
            column = f"drug_use_{answer}"
            count, margin = table[column][row], table[f"{column}_moe95"][row]
            assert table.schema[column] == pl.Int64 and count == round(estimate[j])
            # the truth is an integer: within h of the estimate, it is within this of count
            held = math.ceil(moe[j] + abs(count - estimate[j])) - 1
            assert margin == math.ceil(moe[j] + 1) - 1 >= held
            share, share_margin = table[f"{column}_share"][row], table[f"{column}_share_moe95"][row]
            place = 1 - math.floor(math.log10(moe[j] / n[0]))
            assert share == round(estimate[j] / n[0], place)
            truth_side = abs(share - estimate[j] / n[0]) + moe[j] / n[0]
            assert share_margin >= truth_side - 1e-12 and share_margin * 10**place % 1 < 1e-6


def test_margins_add_up_in_integers() -> None:
    """With margins the cells are rounded so that the grand total is still their sum (a
    controlled rounding), with the projection and without."""
    for project in (True, False):
        table = dp.release(reports().to_pandas(), spec(margins=[[]], project=project)).table
        cells, total = (
            table.filter(pl.col("level") == "region"),
            table.filter(pl.col("level") == "total"),
        )
        for answer in ANSWERS:
            column = f"drug_use_{answer}"
            assert table.schema[column] == pl.Int64
            assert total[column][0] == cells[column].sum()


def test_shares_are_flagged_suppressed_and_rounded_as_central_values(tmp_path: Path) -> None:
    """`dprelease release` with a rounding base and reliability rules: counts to multiples of 5
    (integers, margins + 4), a share flagged by a relative-margin rule like any value (before:
    the shares had no flag column and no rule read them), `value_below` testing the counts (a
    share is a fraction of its row), and `apply_to: row` blanking the row's shares too."""
    rules = [
        {"name": "wide", "relative_margin_above": 0.3, "action": "flag"},
        {"name": "few", "value_below": 25, "action": "suppress", "apply_to": "row"},
    ]
    path = write_spec(tmp_path, spec(postprocess={"round_to": 5, "rules": rules}))
    frame = reports(n=400)
    frame.write_parquet(tmp_path / "answers.parquet")
    dp.local.record_wave(spec(), ledger=dp.Ledger(str(tmp_path / "ledger.sqlite")), cap=2)
    released = invoke_cli(
        "release", "--spec", str(path), "--data", str(tmp_path / "answers.parquet"),
        "--out", str(tmp_path / "pub"), "--ledger", str(tmp_path / "ledger.sqlite"),
    )  # fmt: skip
    assert released.exit_code == 0, released.output
    table = pl.read_parquet(tmp_path / "pub" / "release.parquet")
    unrounded = dp.release(frame, spec()).table
    shares = [f"drug_use_{answer}_share" for answer in ANSWERS]
    assert {f"{share}_flag" for share in shares} <= set(table.columns)
    # the rule reads the counts rounded to base 5: below 20 they stay below 25, from 25 on
    # they stay at or above it (row n's least is 26, row s's 16)
    lowest = [min(unrounded[f"drug_use_{a}"][row] for a in ANSWERS) for row in range(2)]
    assert lowest[0] >= 25 and lowest[1] < 20
    for row in range(table.height):
        few = lowest[row] < 20
        for answer, share in zip(ANSWERS, shares, strict=True):
            count = table[f"drug_use_{answer}"][row]
            if few:  # the row's counts and shares blank, flagged
                assert count is None and table[share][row] is None
                assert table[f"{share}_flag"][row] == "u"
                continue
            assert count % 5 == 0 and table.schema[f"drug_use_{answer}"] == pl.Int64
            wide = table[f"{share}_moe95"][row] > 0.3 * abs(table[share][row])
            assert (table[f"{share}_flag"][row] == "u") == wide
    assert any(table[f"{share}_flag"].to_list().count("u") for share in shares)
