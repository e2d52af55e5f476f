"""Releases with margins through the release path: the spec, the per-level budget,
one table holding every level that adds up exactly, its margins of error, solver fallbacks,
and one ledger charge whatever the number of levels.

Statistical tests use fixed seeds and state their false-alarm rates (the chance that a correct
implementation fails them with a fresh seed).
"""

from __future__ import annotations

import warnings
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from helpers import ZERO, allocation_of, prepare_release
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import dprelease as dp
from dprelease.change import ProtectedChange
from dprelease.errors import SpecError
from dprelease.mechanism.margins import _consistency, _rounding
from dprelease.mechanism.margins import _levels as _margins
from dprelease.mechanism.noise import NoiseSource
from dprelease.publish import decide_budget, prepare
from dprelease.spec import LEVEL_COLUMN, parse_spec
from dprelease.statement import Manifest
from dprelease.statement._manifest import CountEntry, LevelMeasurementEntry, MeanEntry, SumEntry

REGIONS = ["r0", "r1", "r2"]
#: A joint region × clinic domain, regions of 1, 2 and 3 clinics.
CLINICS = [("r0", "c0"), ("r1", "c1"), ("r1", "c2"), ("r2", "c3"), ("r2", "c4"), ("r2", "c5")]


def spec(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "name": "t",
        "source": "t",
        "group_by": [
            {"column": "region", "domain": {"values": REGIONS}},
            {"column": "age", "domain": {"min": 0, "max": 1}},
        ],
        "margins": [["region"], []],
        "statistics": [
            {"name": "n", "kind": "count"},
            {"name": "cost", "kind": "sum", "column": "x", "lower": 0, "upper": 10},
        ],
    }
    base.update(overrides)
    return {key: value for key, value in base.items() if value is not None}


def rows(n: int, seed: int) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    return pl.DataFrame(
        {
            "region": rng.choice(REGIONS, n),
            "age": rng.integers(0, 2, n),
            "x": rng.integers(0, 11, n).astype(float),
        }
    )


def seeded(seed: int) -> dict[str, Any]:
    return {"noise": NoiseSource.seeded_for_tests(seed), "allow_unsafe_noise": True}


def levels_of(manifest: Manifest) -> dict[str, list[LevelMeasurementEntry]]:
    """What the manifest states of every level of each count and sum."""
    return {
        entry.name: entry.levels or []
        for entry in manifest.statistics
        if not isinstance(entry, MeanEntry)
    }


def blocks_by_level(table: pl.DataFrame) -> dict[str, pl.DataFrame]:
    return {level: block for (level,), block in table.group_by(LEVEL_COLUMN, maintain_order=True)}


# --------------------------------------------------------------------------- the spec


@pytest.mark.parametrize(
    ("overrides", "path", "words"),
    [
        ({"margins": [["town"]]}, "release.margins[0]", "'town' is not a group-by column"),
        ({"margins": [["region", "region"]]}, "release.margins[0]", "listed twice"),
        ({"margins": [["age", "region"]]}, "release.margins[0]", "all the group-by columns"),
        ({"margins": [[], ["region"], []]}, "release.margins[2]", "margin is listed twice"),
        ({"level_weights": [1, 2]}, "release.level_weights", "one weight per level: 3"),
        ({"margins": None, "level_weights": [1]}, "release.level_weights", "add them"),
        ({"group_by": None, "margins": [[]]}, "release.margins", "need group_by"),
        (
            {"statistics": [{"name": "level", "kind": "count"}]},
            "release",
            "'level'",
        ),
    ],
)
def test_bad_margins_are_refused_naming_the_yaml_path(
    overrides: dict[str, Any], path: str, words: str
) -> None:
    with pytest.raises(SpecError, match=words) as refused:
        parse_spec(spec(**overrides))
    assert refused.value.path == path


def test_three_crossed_margins_are_refused_two_chains_are_not() -> None:
    three = {
        "group_by": [{"column": c, "domain": {"values": ["x", "y"]}} for c in ("a", "b", "c")],
        "statistics": [{"name": "n", "kind": "count"}],
    }
    with pytest.raises(SpecError, match="cross") as refused:
        parse_spec(spec(**three, margins=[["a"], ["b"], ["c"]]))
    assert refused.value.path == "release.margins"
    parse_spec(spec(**three, margins=[["a", "b"], ["a"], ["c"], []]))  # two chains


def test_no_margins_is_the_same_spec_and_hash_as_before() -> None:
    plain = parse_spec(spec(margins=None))
    assert parse_spec(spec(margins=[])).spec == plain.spec
    assert parse_spec(spec(margins=[])).hash == plain.hash
    assert parse_spec(spec()).hash != plain.hash
    assert "margins" not in plain.spec.canonical_json()


# --------------------------------------------------------------------------- the budget


def test_each_level_gets_its_share_with_the_statistics_sensitivity() -> None:
    planned = allocation_of(parse_spec(spec(level_weights=[2, 1, 1])), Fraction(1, 3))
    count = planned.measurements[0]
    assert [level.epsilon for level in count.levels] == [
        Fraction(1, 12),
        Fraction(1, 24),
        Fraction(1, 24),
    ]
    assert count.loss_spent.epsilon == Fraction(1, 6)  # half of ε, split 2:1:1 over the levels
    assert {level.sensitivity_units for level in count.levels} == {1}
    assert [m.columns for m in count.margins] == [("region",), ()]
    # every level's noise spends at most its share
    for m in planned.measurements:
        for level in m.levels:
            assert Fraction(level.sensitivity_units) / level.scale_units <= level.epsilon


def test_the_grand_total_keeps_the_smaller_ungrouped_sensitivity_under_substitution() -> None:
    resolved = parse_spec(spec(neighbours="substitute", privacy_unit="pid", max_rows_per_unit=3))
    count, total = allocation_of(resolved, Fraction(1), ProtectedChange.SUBSTITUTE).measurements
    assert [level.sensitivity_units for level in count.levels] == [6, 6, 3]
    assert "×2" not in count.margins[1].derivation
    # a sum's granularity is the finest of its levels' automatic ones: every level keeps 2^20
    assert all(level.scale_units >= 2**20 for level in total.levels)
    assert [level.sensitivity for level in total.levels][2] == pytest.approx(30, rel=1e-5)


# --------------------------------------------------------------------------- the table


def test_one_table_holds_every_level_with_nulls_where_a_level_aggregates() -> None:
    result = dp.release(rows(300, 1), dp.ReleaseSpec.model_validate(spec()), epsilon=1)
    table = result.table
    assert table.columns[:3] == [LEVEL_COLUMN, "region", "age"]
    assert table.schema["age"] == pl.Int64 and table.height == 6 + 3 + 1
    blocks = blocks_by_level(table)
    assert list(blocks) == ["region,age", "region", "total"]
    assert blocks["region"]["region"].to_list() == REGIONS
    assert blocks["region"]["age"].null_count() == 3
    assert blocks["total"].select("region", "age").null_count().row(0) == (1, 1)
    manifest = result.manifest
    assert isinstance(manifest, Manifest) and manifest.margins is not None
    assert [(level.level, level.rows) for level in manifest.margins.levels] == [
        ("region,age", 6),
        ("region", 3),
        ("total", 1),
    ]


def test_a_joint_domain_releases_its_regions(tmp_path: Path) -> None:
    (tmp_path / "clinics.csv").write_text(
        "region,clinic\n" + "".join(f"{r},{c}\n" for r, c in CLINICS)
    )
    (tmp_path / "spec.yaml").write_text(
        "release:\n  name: t\n  source: t\n"
        "  group_by: [{columns: [region, clinic], domain: {file: clinics.csv}}]\n"
        "  margins: [[region], []]\n  statistics: [{name: n, kind: count}]\n"
    )
    data = pl.DataFrame({"region": ["r2"] * 5, "clinic": ["c4"] * 5})
    result = dp.release(data, tmp_path / "spec.yaml", epsilon=1)
    blocks = blocks_by_level(result.table)
    assert blocks["region,clinic"].select("region", "clinic").rows() == CLINICS
    assert blocks["region"]["region"].to_list() == ["r0", "r1", "r2"]


def assert_additive(table: pl.DataFrame, keys: list[str], value: str, places: int) -> None:
    """Every margin row equals the sum of its released cells exactly, in units of 10^-places
    (integers for counts)."""
    units = (pl.col(value) * 10.0**places).round(0).cast(pl.Int64).alias("__units")
    blocks = list(blocks_by_level(table.with_columns(units)).values())
    cells = blocks[0]
    for block in blocks[1:]:
        kept = [column for column in keys if block[column].null_count() == 0]
        if kept:
            summed = cells.group_by(kept).agg(pl.col("__units").sum())
            expected = block.select(kept).join(summed, on=kept, how="left", maintain_order="left")
            assert expected["__units"].to_list() == block["__units"].to_list(), (value, kept)
        else:
            assert block["__units"].to_list() == [cells["__units"].sum()], value


@st.composite
def margin_specs(draw: st.DrawFn) -> dict[str, Any]:
    """A valid spec with margins: 1–3 key columns, any margins the spec accepts, counts, sums
    (possibly of negative values) and means, any rounding and weights."""
    columns = ["a", "b", "c"][: draw(st.integers(1, 3))]
    group_by = [
        {"column": c, "domain": {"values": ["x", "y", "z"][: draw(st.integers(1, 3))]}}
        for c in columns
    ]
    subsets = [
        [c for c, keep in zip(columns, mask, strict=False) if keep]
        for mask in draw(st.lists(st.lists(st.booleans(), min_size=3, max_size=3), max_size=4))
    ]
    margins = [m for i, m in enumerate(subsets) if m != columns and m not in subsets[:i]]
    assume(margins)
    lower, upper = draw(st.sampled_from([(0, 10), (-5, 5), (2, 7)]))
    statistics: list[dict[str, Any]] = [{"name": "n", "kind": "count"}]
    bounded = {"column": "v", "lower": lower, "upper": upper}
    if draw(st.booleans()):
        statistics.append({"name": "s", "kind": "sum", **bounded})
    if draw(st.booleans()):
        statistics.append({"name": "m", "kind": "mean", **bounded})
    drawn: dict[str, Any] = {
        "name": "p",
        "source": "p",
        "group_by": group_by,
        "margins": margins,
        "statistics": statistics,
        "postprocess": {
            "nonnegative": draw(st.booleans()),
            "decimals": draw(st.sampled_from([None, 0, 3])),
        },
    }
    if draw(st.booleans()):
        drawn["level_weights"] = draw(
            st.lists(st.sampled_from([1, 2, 0.5]), min_size=1 + len(margins)).map(
                lambda w: w[: 1 + len(margins)]
            )
        )
    return drawn


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    drawn=margin_specs(),
    epsilon=st.sampled_from([0.1, 1.0, 10.0]),
    size=st.integers(0, 40),
    seed=st.integers(0, 2**32),
)
def test_every_level_is_the_exact_sum_of_its_released_cells(
    drawn: dict[str, Any], epsilon: float, size: int, seed: int
) -> None:
    try:
        resolved = parse_spec(drawn)
    except SpecError:  # three crossed margins: refused, tested above
        assume(False)
    rng = np.random.default_rng(seed)
    keys = {g["column"]: rng.choice(g["domain"]["values"], size) for g in drawn["group_by"]}
    data = pl.DataFrame({**keys, "v": rng.uniform(-8, 12, size)})
    result = prepare_release(data, resolved, epsilon).draw(**seeded(seed))
    manifest = Manifest.model_validate(result.manifest.to_json_dict())
    stated = {s.name: s for s in manifest.statistics}
    key_columns = resolved.spec.key_columns
    assert_additive(result.table, key_columns, "n", 0)
    if "s" in stated:
        assert_additive(result.table, key_columns, "s", stated["s"].decimals)
    assert manifest.margins is not None and manifest.margins.fallbacks == []


LINEAR = {"nonnegative": False, "decimals": 6}  # the unbiased linear estimate, finely rounded


def releases(prepared: Any, n: int, seed: int) -> list[pl.DataFrame]:
    source = NoiseSource.seeded_for_tests(seed)
    return [prepared.draw(source, allow_unsafe_noise=True).table for _ in range(n)]


@pytest.mark.parametrize("mechanism", ["laplace", "gaussian"])
def test_the_linear_estimate_is_unbiased_and_its_margins_cover_95_percent(mechanism: str) -> None:
    """500 seeded releases of counts and sums with margins, against the truth (a release with
    zero noise). Per row, the mean error is within 4 standard errors of 0 (20 rows: false alarm
    about 1.3e-3 together); per level, the fraction of rows within their stated margin, averaged
    over releases, is within 3.3 standard errors of 95% for the sum (its margin is the exact
    quantile of a near-continuous error, at most ~0.2 points conservative) and at or above it
    for the integer counts (whose margins add the rounding); false alarm about 1e-3 per level.
    Rows of one release are correlated through the margins, so coverage is not a binomial count
    over rows: the test takes each release's fraction and their spread across releases, which
    are independent (for the one-row total it is the binomial test's normal form). Discrete
    Laplace noise at ε = 1, and discrete Gaussian noise at ρ = 1/2 (whose margins of error
    invert the exact law of a mix of Gaussian draws)."""
    resolved = parse_spec(spec(postprocess=LINEAR, mechanism=mechanism))
    if mechanism == "laplace":
        prepared = prepare_release(rows(300, 1), resolved, 1)
    else:
        budget = decide_budget(resolved, rho=Fraction(1, 2))
        prepared = prepare(rows(300, 1), resolved, budget)
    truth = prepared.draw(ZERO(), allow_unsafe_noise=True).table
    tables = releases(prepared, 500, seed=11)
    levels = truth.get_column(LEVEL_COLUMN).to_numpy()
    for name in ("n", "cost"):
        released = np.stack([t.get_column(name).to_numpy() for t in tables])
        error = released - truth.get_column(name).to_numpy()
        margin = np.stack([t.get_column(f"{name}_moe95").to_numpy() for t in tables])
        standard_error = error.std(axis=0, ddof=1) / np.sqrt(len(tables))
        assert np.all(np.abs(error.mean(axis=0)) < 4 * standard_error), name
        for level in np.unique(levels):
            covered = (np.abs(error) <= margin)[:, levels == level].mean(axis=1)
            spread = covered.std(ddof=1) / np.sqrt(len(tables))
            z = (covered.mean() - 0.95) / spread
            assert z > -3.3 if name == "n" else abs(z) < 3.3, (name, level, covered.mean())


def test_nonnegativity_lifts_sparse_totals_as_the_manifest_says() -> None:
    """The constrained estimate is biased upward where true cells are 0: over 100 releases of an
    empty input the grand total's mean error is positive (z > 4; the bias is ~5 standard errors
    per release, so a correct implementation fails with probability below 1e-9), and the
    manifest says so."""
    prepared = prepare_release(rows(0, 1), parse_spec(spec()), 1)
    totals = [t.get_column("n")[-1] for t in releases(prepared, 100, seed=12)]
    assert np.mean(totals) > 4 * np.std(totals, ddof=1) / np.sqrt(len(totals))
    assert min(totals) >= 0
    assert prepared.manifest.margins is not None
    assert "81%" in (prepared.manifest.margins.nonnegative or "")


# --------------------------------------------------------------------------- after the noise


def test_the_manifest_states_before_the_noise_what_the_release_states_after() -> None:
    prepared = prepare_release(
        rows(200, 2),
        parse_spec(
            spec(
                statistics=[
                    {"name": "n", "kind": "count"},
                    {"name": "avg", "kind": "mean", "column": "x", "lower": 0, "upper": 10},
                ]
            )
        ),
        1,
    )
    result = prepared.draw(**seeded(3))
    # all but the noise source (the prepared manifest states the system CSPRNG)
    assert result.manifest.noise_source != prepared.manifest.noise_source
    assert result.manifest.model_copy(update={"noise_source": None}) == (
        prepared.manifest.model_copy(update={"noise_source": None})
    )
    count, mean = result.manifest.statistics
    assert isinstance(count, CountEntry) and isinstance(mean, MeanEntry)
    assert [level.max_shift for level in count.levels or []] == [1.0, 1.0, 1.0]
    (own,) = mean.measurements  # the mean divides its own sum (never rounded) by n
    assert [level.max_shift for level in own.levels or []] == [None, None, None]


@pytest.mark.parametrize(
    "failure",
    [
        RuntimeError("nonnegative solve failed: MaxIterations"),
        pl.exceptions.PanicException("a Rust solver panicked"),  # a BaseException
    ],
)
def test_a_nonnegative_solve_that_fails_releases_the_linear_estimate_and_says_so(
    monkeypatch: pytest.MonkeyPatch, failure: BaseException
) -> None:
    def fails(*args: Any) -> None:
        raise failure

    data = rows(100, 3)
    linear_spec = parse_spec(spec(postprocess={"nonnegative": False}))
    linear = prepare_release(data, linear_spec, 1).draw(**seeded(4))
    monkeypatch.setattr(_consistency, "consistent_nonnegative", fails)
    fell_back = prepare_release(data, parse_spec(spec()), 1).draw(**seeded(4))
    assert fell_back.table.equals(linear.table)  # the same noise, the linear estimate
    manifest = Manifest.model_validate(fell_back.manifest.to_json_dict())
    assert manifest.margins is not None
    notes = manifest.margins.fallbacks
    assert [note.split(":")[0] for note in notes] == ["n", "cost"]
    assert "unconstrained estimate is released" in notes[0]


def test_a_rounding_that_fails_rounds_to_nearest_and_states_its_shift(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def fails(*args: Any) -> None:
        raise RuntimeError("integer rounding failed")

    resolved = parse_spec(spec(postprocess={"nonnegative": False}))
    prepared = prepare_release(rows(100, 3), resolved, 0.05)
    planned = levels_of(prepared.manifest)
    monkeypatch.setattr(_rounding, "round_additive", fails)
    result = prepared.draw(**seeded(5))
    manifest = Manifest.model_validate(result.manifest.to_json_dict())
    assert manifest.margins is not None and len(manifest.margins.fallbacks) == 2
    stated = levels_of(manifest)
    cost = next(s for s in manifest.statistics if s.name == "cost")
    assert isinstance(cost, SumEntry)
    assert_additive(result.table, ["region", "age"], "n", 0)
    assert_additive(result.table, ["region", "age"], "cost", cost.decimals)
    for name in ("n", "cost"):
        shifts = [level.max_shift for level in stated[name]]
        assert shifts[0] == planned[name][0].max_shift  # cells: nearest, < 1 unit
        total = stated[name][2]
        assert total.max_shift is not None and planned[name][2].max_shift is not None
        assert total.max_shift >= planned[name][2].max_shift
        assert total.moe95 >= planned[name][2].moe95  # widened by the shift
        if name == "n":  # the published column says what the manifest says
            assert result.table.get_column("n_moe95")[-1] == total.moe95


def test_epsilon_is_charged_once_whatever_the_number_of_levels(tmp_path: Path) -> None:
    url = str(tmp_path / "ledger.sqlite")
    four_levels = dp.ReleaseSpec.model_validate(spec(margins=[["region"], ["age"], []]))
    with dp.Ledger(url) as ledger:
        ledger.ensure_scope("t", 1)
        first = dp.release(rows(100, 4), four_levels, epsilon="1/4", ledger=ledger)
        again = dp.release(rows(100, 4), four_levels, epsilon="1/4", ledger=ledger)
        status = ledger.status("t")[0]
        events = [e.kind for e in ledger.history("t")]
    assert (first.charged, again.charged) == (True, False)
    assert status.spent == Fraction(1, 4) and status.releases == 1
    assert events == ["scope_created", "terms_fixed", "reserved", "committed", "reused"]
    assert first.table.height == 6 + 3 + 2 + 1 and again.table.equals(first.table)
    spent = sum(
        Fraction(level.epsilon_exact)
        for entry in first.manifest.statistics
        for level in entry.levels or []
    )
    assert spent == Fraction(1, 4)


def test_margins_of_large_fine_sums_add_up_instead_of_wrapping_around() -> None:
    """4000 in each of 3000 cells at 12 decimals: the grand total is 1.2·10^19 units of 10^-12,
    past int64. Every level is rounded in floats then, and still adds up: no wrap-around and no
    numpy warning (a warning made an error would fail the release after its noise was drawn)."""
    resolved = parse_spec(
        {
            "name": "big",
            "source": "x",
            "group_by": [
                {"column": "a", "domain": {"min": 0, "max": 59}},
                {"column": "b", "domain": {"min": 0, "max": 49}},
            ],
            "margins": [["a"], []],
            "statistics": [{"name": "v", "kind": "sum", "column": "v", "lower": 0, "upper": 5000}],
            "postprocess": {"decimals": 12},
        }
    )
    data = pl.DataFrame({"a": [i % 60 for i in range(3000)], "b": [i // 60 for i in range(3000)]})
    data = data.with_columns(v=pl.lit(4000.0))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = prepare_release(data, resolved, 1000).draw(
            NoiseSource.seeded_for_tests(1), allow_unsafe_noise=True
        )
    by_level = {
        level: block.get_column("v")
        for (level,), block in result.table.partition_by(LEVEL_COLUMN, as_dict=True).items()
    }
    assert by_level["total"].item() == pytest.approx(1.2e7, rel=1e-4)
    assert by_level["a"].sum() == pytest.approx(by_level["total"].item(), rel=1e-12)
    assert by_level["a,b"].sum() == pytest.approx(by_level["total"].item(), rel=1e-12)
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)]


def test_counts_beyond_int64_saturate_and_say_so() -> None:
    outcome = _margins.Outcome()
    values = np.array([1.0, -3.0, 2.0**63, -(2.0**64)])
    converted = _margins._as_int64(values, "n", outcome)
    assert converted.tolist() == [1, -3, 2**62, -(2**62)]
    assert outcome.fallbacks == [
        "n: noisy counts beyond ±2^62 were saturated there (the noise scale is far beyond any "
        "useful release)"
    ]
    assert _margins._as_int64(values[:2], "n", outcome).dtype == np.int64
    assert len(outcome.fallbacks) == 1
