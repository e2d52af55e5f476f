"""`dp.plan` and `dprelease plan`: what a release at ε will state, without data, matching the
release's manifest exactly; and the smallest ε for target margins, exact against the discrete
Laplace quantile a release draws from."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

import polars as pl
import pytest
from helpers import ROOT, allocation_of
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import dprelease as dp
from dprelease.change import ProtectedChange
from dprelease.cli import app
from dprelease.errors import SpecError
from dprelease.loss import PrivacyLoss
from dprelease.mechanism import sensitivity_bound
from dprelease.spec import ResolvedSpec, parse_spec
from dprelease.statement import Manifest, accuracy_of, epsilon_for_targets, plan
from dprelease.statement._search import _unit

PRIVACY = ROOT / "examples" / "case_control.yaml"  # ε = 0.3
ADD_REMOVE = ProtectedChange.ADD_REMOVE
SPEC = """\
release:
  name: visits
  source: visits
  privacy_unit: pid
  max_rows_per_unit: 3
  period: {column: day}
  group_by: [{column: region, domain: {values: [n, s]}}]
  statistics:
    - {name: n, kind: count}
    - {name: cost, kind: sum, column: cost, lower: 0, upper: 123.7}
    - {name: avg_cost, kind: mean, column: cost, lower: 0, upper: 123.7}
    - {name: avg_stay, kind: mean, column: stay, lower: 0, upper: 30, weight: 2}
"""
runner = CliRunner()


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    (tmp_path / "spec.yaml").write_text(SPEC)
    pl.DataFrame(
        {
            "pid": [1, 2, 3],
            "region": ["n", "s", "s"],
            "cost": [10.0, 20.0, 30.0],
            "stay": [1.0, 2.0, 3.0],
            "day": pl.Series(["2024-03-01"] * 3).str.to_date(),
        }
    ).write_parquet(tmp_path / "data.parquet")
    return tmp_path


def invoke(*args: str):
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


#: The same release with its grand total as a margin.
MARGINS = SPEC.replace("  statistics:", "  margins: [[]]\n  statistics:")


@pytest.mark.parametrize("text", [SPEC, MARGINS], ids=["cells", "margins"])
@pytest.mark.parametrize("budget", [("--epsilon", "1/7"), ("--config", str(PRIVACY))])
def test_plan_matches_the_manifest_of_the_release_it_plans(
    ws: Path, budget: tuple[str, str], text: str
) -> None:
    (ws / "spec.yaml").write_text(text)
    planned = json.loads(invoke("plan", "--spec", str(ws / "spec.yaml"), *budget, "--json"))
    manifest = json.loads(
        invoke(
            "release",
            *("--spec", str(ws / "spec.yaml"), "--data", str(ws / "data.parquet")),
            *("--out", str(ws / "out"), "--ledger", str(ws / "l.sqlite"), "--cap", "0.3"),
            *("--period", "2024-03", *budget, "--json"),
        )
    )
    assert planned["epsilon_total_exact"] == manifest["epsilon_total_exact"]
    assert planned["neighbours"] == manifest["neighbours"]
    stated = {s["name"]: s for s in manifest["statistics"]}
    for row in planned["statistics"]:
        entry = stated[row["name"]]
        assert (row["kind"], row["epsilon"], row["epsilon_exact"]) == (
            entry["kind"],
            entry["epsilon"],
            entry["epsilon_exact"],
        )
        if row["kind"] != "mean":
            assert (row["sensitivity"], row["scale"], row["moe95"]) == (
                entry["sensitivity"],
                entry["noise_scale"],
                entry["moe95"],
            )
    released = accuracy_of(Manifest.model_validate(manifest).statistics)
    assert [r.model_dump() for r in released] == planned["statistics"]
    if text == MARGINS:  # every level's margin of error, stated before any data is read
        assert [level["level"] for level in planned["statistics"][0]["levels"]] == [
            "region",
            "total",
        ]


def test_the_json_keys_are_the_documented_ones(ws: Path) -> None:
    planned = json.loads(
        invoke("plan", "--spec", str(ws / "spec.yaml"), "--epsilon", "1", "--json")
    )
    assert {"epsilon_total", "statistics", "epsilon_for_targets"} <= planned.keys()
    for row in planned["statistics"]:
        assert {"name", "epsilon", "sensitivity", "scale", "moe95"} <= row.keys()
    guide = (ROOT / "docs" / "guide.md").read_text()
    for key in ("statistics[].name", "epsilon", "sensitivity", "scale", "moe95", "epsilon_total"):
        assert f"`{key}`" in guide


@pytest.mark.parametrize("text", [SPEC, MARGINS], ids=["cells", "margins"])
def test_the_text_plan_reads_at_80_columns(ws: Path, text: str) -> None:
    (ws / "spec.yaml").write_text(text)
    result = CliRunner(env={"COLUMNS": "80"}).invoke(
        app, ["plan", "--spec", str(ws / "spec.yaml"), "--target", "n=5", "--target", "cost=400"]
    )
    assert result.exit_code == 0, result.output
    assert all(len(line) <= 80 for line in result.stdout.splitlines())
    assert "smallest ε meeting every target" in result.stdout
    assert "avg_cost: reuses cost, n;" in " ".join(result.stdout.split())
    assert ("95% margins of error per level" in result.stdout) == (text == MARGINS)


def test_with_margins_a_target_is_the_largest_margin_of_the_released_cells() -> None:
    """Targets apply to the cells as released (the consistent estimate, rounded): the search
    finds the smallest ε whose planned cells meet them, and no smaller grid point does."""
    spec = parse_spec(
        {
            "name": "t",
            "source": "t",
            "group_by": [{"column": "r", "domain": {"values": ["a", "b", "c"]}}],
            "margins": [[]],
            "statistics": [
                {"name": "n", "kind": "count", "target_moe95": 20},
                {
                    "name": "s",
                    "kind": "sum",
                    "column": "x",
                    "lower": 0,
                    "upper": 9,
                    "target_moe95": 90,
                },
            ],
        }
    )
    found = plan(spec, None, ADD_REMOVE)
    assert found.targets_met and found.epsilon_for_targets is not None
    epsilon = Fraction(found.epsilon_for_targets_exact or "0")
    below = plan(spec, PrivacyLoss.pure(epsilon - _unit(epsilon)), ADD_REMOVE)
    assert not below.targets_met
    for row in found.statistics:
        assert row.levels is not None and row.moe95 is not None
        assert row.moe95 == row.levels[0].moe95 <= (row.target_moe95 or 0)
        # a cell measured alone at the cells' share of ε would miss it: consistency helps
        assert allocation_of(spec, epsilon).statistics[0].measurement.moe95 > 20


def meets(spec: ResolvedSpec, epsilon: Fraction, targets: dict[str, float]) -> bool:
    planned = allocation_of(spec, epsilon)
    margin = {p.statistic.name: p.measurement.moe95 for p in planned.statistics}
    return all(margin[name] <= target for name, target in targets.items())


def test_the_inverse_uses_the_discrete_quantile_not_the_continuous_one() -> None:
    """A count margin of 0.5 needs the noise to be 0 with probability 0.95: ε ≥ ln 39 ≈ 3.664,
    where Δ·ln(20)/target would say 5.99."""
    spec = parse_spec({"name": "t", "source": "t", "statistics": [{"name": "n", "kind": "count"}]})
    found = epsilon_for_targets(spec, {"n": 0.5}, ADD_REMOVE)
    assert math.log(39) <= found < math.log(39) + 1e-5
    assert meets(spec, found, {"n": 0.5}) and not meets(spec, found - _unit(found), {"n": 0.5})
    assert plan(spec, None, ADD_REMOVE, targets={"n": 0.5}).epsilon_total_exact == str(found)


def test_the_inverse_finds_a_smallest_epsilon_just_below_a_granularity_change() -> None:
    """Where the automatic granularity halves (here at ε = Δ/2^11 for upper = 123.7), a margin
    steps up by ~1e-5 of itself: a target inside that step is met just below the change, not
    just above it, and the search must not miss the lower range."""
    spec = parse_spec(
        {
            "name": "t",
            "source": "t",
            "statistics": [{"name": "s", "kind": "sum", "column": "x", "lower": 0, "upper": 123.7}],
        }
    )
    cut = sensitivity_bound(spec.spec.statistics[0], spec.spec, ADD_REMOVE) / 2**11
    margin = {
        side: allocation_of(spec, epsilon).statistics[0].measurement.moe95
        for side, epsilon in (("below", cut), ("above", cut * (1 + Fraction(1, 10**9))))
    }
    assert margin["above"] > margin["below"]  # the step up
    target = (margin["above"] + margin["below"]) / 2
    found = epsilon_for_targets(spec, {"s": target}, ADD_REMOVE)
    unit = _unit(found)
    assert found <= cut and meets(spec, found, {"s": target})
    assert not meets(spec, found - unit, {"s": target})
    assert not meets(spec, cut * (1 + Fraction(1, 10**9)), {"s": target})  # larger ε, missed


BOUNDS = st.sampled_from([(0.0, 123.7), (-5.0, 5.0), (0.0, 1.0), (2.5, 1e6)])


@settings(max_examples=40, deadline=None)
@given(
    bounds=BOUNDS,
    granularity=st.sampled_from([None, None, 0.5]),
    rows=st.integers(1, 5),
    count_target=st.floats(0.3, 500),
    sum_target=st.floats(0.01, 1e6),
    weight=st.floats(0.2, 5),
)
def test_the_smallest_epsilon_meets_every_target_and_no_smaller_one_does(
    bounds: tuple[float, float],
    granularity: float | None,
    rows: int,
    count_target: float,
    sum_target: float,
    weight: float,
) -> None:
    total = {"name": "s", "kind": "sum", "column": "x", "lower": bounds[0], "upper": bounds[1]}
    if granularity is not None:
        total["granularity"] = granularity
    spec = parse_spec(
        {
            "name": "t",
            "source": "t",
            "privacy_unit": "pid",
            "max_rows_per_unit": rows,
            "statistics": [{"name": "n", "kind": "count", "weight": weight}, total],
        }
    )
    targets = {"n": count_target, "s": sum_target}
    try:
        found = epsilon_for_targets(spec, targets, ADD_REMOVE)
    except SpecError:
        return  # e.g. a granularity coarser than the target allows: no ε meets it
    unit = _unit(found)
    assert found % unit == 0 and meets(spec, found, targets)
    for steps in (1, 2, 3, 10, 100, 1000):  # grid points below, across granularity changes
        if found - steps * unit > 0:
            assert not meets(spec, found - steps * unit, targets), steps


def test_targets_name_counts_and_sums_only() -> None:
    spec = parse_spec(
        {
            "name": "t",
            "source": "t",
            "statistics": [
                {"name": "n", "kind": "count"},
                {"name": "m", "kind": "mean", "column": "x", "lower": 0, "upper": 1},
            ],
        }
    )
    with pytest.raises(SpecError, match="'m' is a mean"):
        plan(spec, None, ADD_REMOVE, targets={"m": 1})
    with pytest.raises(SpecError, match="no statistic 'q'"):
        plan(spec, None, ADD_REMOVE, targets={"q": 1})
    checked = plan(spec, PrivacyLoss.pure(Fraction(1)), ADD_REMOVE, targets={"n": 1})
    assert checked.targets_met is False and checked.statistics[0].target_met is False
    assert checked.epsilon_for_targets is not None and checked.epsilon_for_targets > 1
    assert dp.plan(spec.spec, 1, targets={"n": 1}) == checked  # the face plans the same


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ((), "give ε (--epsilon or --config), or target margins"),
        (("--target", "n"), "--target: 'n': give NAME=MARGIN"),
        (("--target", "avg_cost=3"), "'avg_cost' is a mean"),
        (("--epsilon", "abc"), "--epsilon"),
    ],
)
def test_bad_plans_exit_2_with_one_line(ws: Path, args: tuple[str, ...], words: str) -> None:
    result = runner.invoke(app, ["plan", "--spec", str(ws / "spec.yaml"), *args])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert words in result.stderr
