"""Both engines implement one contract (PRIVACY.md, "What a release computes"), checked three ways.

(a) Where nothing is truncated, each engine's exact pre-noise aggregates equal a row-by-row
    reference written from the contract, for every spec here and in the repo: so the polars and
    Spark engines agree exactly.
(b) With truncation, every unit keeps exactly min(its rows, R), within the G and R_g bounds.
(c) The kept rows and groups are a uniform choice (χ² over many salts), and a fresh one per salt.

Every check runs on both engines: the polars cases are in the fast tier, the Spark cases are
marked `spark` (they need a local Spark session).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from helpers import ROOT, allocation_of

from dprelease.mechanism import Allocation, Measurement, QuantileAllocation
from dprelease.mechanism.engines import (
    Engine,
    EngineJob,
    ExactAggregates,
    Reported,
    get_engine,
    new_salt,
)
from dprelease.mechanism.noise import NoiseSource
from dprelease.mechanism.randomized import ByteStream, byte_reader, make_randomizer, olh_hash
from dprelease.spec import ResolvedSpec, load_spec, parse_spec, period_of
from pipelines.demo_data import generate_case_control, generate_visits

SPECS = ROOT / "pipelines" / "specs"


@pytest.fixture(scope="module")
def spark_session():
    """One local Spark session for the module's Spark cases (imported only by them)."""
    from sparktest import local_session

    return local_session()


@pytest.fixture(params=["polars", pytest.param("spark", marks=pytest.mark.spark)])
def engine(request: pytest.FixtureRequest) -> Engine:
    """Each engine in turn; the Spark one on the module's session, started only for it."""
    if request.param == "polars":
        return get_engine("polars")
    from dprelease.mechanism.engines.spark import SparkEngine

    return SparkEngine(request.getfixturevalue("spark_session"))


def run_engine(
    chosen: Engine, data: Path, loaded: ResolvedSpec, plan: Allocation, period: str | None
) -> ExactAggregates:
    """Check, then aggregate with a fresh salt, as a release does."""
    month = period_of(loaded.spec.period, period)
    job = EngineJob(data, loaded, plan, month)
    chosen.check(job)
    return chosen.aggregate(job, new_salt())


def values(exact: ExactAggregates, m: Measurement) -> list[int]:
    return [int(v) for v in exact.of(m)]


# --------------------------------------------------------------------------- the reference


def _as_key(value: Any, dtype: pl.DataType) -> Any:
    """Non-strict typing to the domain's dtype; what does not convert is None. An integer
    domain takes integral numbers only (2.0 is 2, 2.5 and NaN are no key)."""
    if isinstance(value, Decimal):
        value = float(value)  # as polars does (exact below 2^53)
    if isinstance(value, float) and dtype.is_integer():
        value = int(value) if math.isfinite(value) and value.is_integer() else None
    if isinstance(value, int) and dtype.is_integer():
        widths = {pl.Int8: 8, pl.Int16: 16, pl.Int32: 32, pl.UInt8: 8, pl.UInt16: 16}
        bits = next((b for t, b in widths.items() if dtype == t), 32 if dtype == pl.UInt32 else 64)
        signed = not dtype.is_unsigned_integer()
        low, high = (-(2 ** (bits - 1)), 2 ** (bits - 1)) if signed else (0, 2**bits)
        return value if low <= value < min(high, 2**63) else None
    return value


def _as_unit(value: Any) -> Any:
    return None if isinstance(value, float) and math.isnan(value) else value


def _clamped(value: Any, lower: float, upper: float, drop: bool = False) -> float | None:
    """Contract §7: null/NaN → 0 if 0 ∈ [lower, upper], else lower (with `missing: drop`:
    None, no value); then clamped."""
    x = None if value is None else float(value)
    if x is None or math.isnan(x):
        if drop:
            return None
        x = 0.0 if lower <= 0 <= upper else lower
    return min(max(x, lower), upper)


def _in_categories(value: Any, categories: tuple[Any, ...]) -> float:
    """A share's indicator: 1 where the value is one of the categories, compared as numbers
    (text parsed) for number categories, as text for text ones; a null or other value is 0."""
    if value is None:
        return 0.0
    if any(isinstance(c, float) for c in categories):
        try:
            return 1.0 if float(value) in categories else 0.0
        except (TypeError, ValueError):
            return 0.0
    return 1.0 if str(value) in categories else 0.0


def _units(row: dict[str, Any], m: Measurement) -> int:
    """Contract §7: the value clamped (a survey weight clamped to [0, W] and multiplied in; a
    weighted count is the weight alone), rounded half to even in units of g, clamped; a share's
    rows in its categories add 1 (× the weight)."""
    value: float | None = 1.0
    categories = getattr(m, "categories", None)
    if categories is not None:
        value = _in_categories(row[m.column], categories)
    elif m.column is not None:
        assert m.lower is not None and m.upper is not None
        value = _clamped(row[m.column], m.lower, m.upper, m.drop)
        if value is None:  # missing: drop, and no value: the row adds 0
            return 0
    if m.survey_weight is not None:
        weight = _clamped(row[m.survey_weight.column], 0.0, m.survey_weight.upper)
        assert weight is not None and value is not None
        value = weight if m.column is None else value * weight
    assert value is not None
    units = round(value / float(m.granularity))  # Python rounds half to even, exactly
    return min(max(units, m.lower_units), m.upper_units)


def _reported(row: dict[str, Any], term: Reported) -> int:
    """Contract for randomized reports (PRIVACY.md, "Local DP"), report by report: a null report
    is no answer; k-RR's report is an answer of the domain, compared as its type (text, integers
    as numbers, booleans as true/false); OUE's is k characters 0/1; OLH's is "a:b:y" with
    1 ≤ a < P, 0 ≤ b < P, 0 ≤ y < g, supporting answer j where ((a·j + b) mod P) mod g = y."""
    report, r = row[term.column], term.randomizer
    if report is None:
        return 0
    if term.test == "answered":
        return 1
    if term.test == "stale":
        return int(row[term.hash_column] != term.expected)
    supports: list[bool] = []
    if r.mechanism == "krr":
        for answer in r.domain:
            if isinstance(answer, bool):
                supports.append(str(report).lower() == str(answer).lower())
            elif isinstance(answer, int):
                try:
                    supports.append(float(report) == answer)
                except ValueError:
                    supports.append(False)
            else:
                supports.append(str(report) == answer)
        well_formed = any(supports)
    elif r.mechanism == "oue":
        well_formed = len(report) == r.k and set(report) <= {"0", "1"}
        supports = [well_formed and report[j] == "1" for j in range(r.k)]
    else:
        assert r.g is not None
        parts = report.split(":")
        numbers = [int(p) for p in parts if p.isdigit() and len(p) <= 10]
        well_formed = len(parts) == 3 == len(numbers)
        if well_formed:
            a, b, y = numbers
            well_formed = 1 <= a < 2**31 - 1 and 0 <= b < 2**31 - 1 and 0 <= y < r.g
        supports = [well_formed and olh_hash(a, b, j, r.g) == y for j in range(r.k)]
    if term.test == "malformed":
        return int(not well_formed)
    return int(supports[term.answer])


def _point(value: Any, q: QuantileAllocation) -> int | None:
    """Contract §7 for a quantile: the nulls rule of a sum (with `missing: drop`, a row without
    a value has no point: None); clamp; (x − lower)/resolution in float64, rounded half to
    even; clamp to the grid's indices."""
    lower, upper = q.statistic.lower, q.statistic.upper
    x = None if value is None else float(value)
    if x is None or math.isnan(x):
        if q.statistic.missing == "drop":
            return None
        x = 0.0 if lower <= 0 <= upper else lower
    x = min(max(x, lower), upper)
    return min(max(round((x - lower) / float(q.grid.resolution)), 0), q.grid.bins - 1)


def _mass(row: dict[str, Any], q: QuantileAllocation) -> int:
    """Contract §7 for a weighted quantile: what a row adds at its grid point, its weight by
    the nulls rule clamped to [0, W], rounded half to even in steps of the weight resolution,
    clamped to W in steps; 1 (a row) unweighted."""
    if q.weight is None:
        return 1
    weight = _clamped(row[q.weight.column], 0.0, q.weight.upper)
    assert weight is not None
    steps = round(weight / float(q.plan.mass_unit))  # Python rounds half to even, exactly
    return min(max(steps, 0), q.plan.mass_per_row)


def histogram_of(exact: ExactAggregates, q: QuantileAllocation) -> dict[tuple[int, int], int]:
    """An engine's histogram of a quantile statistic as {(cell, grid point): rows}."""
    rows = exact.histograms[q.statistic.name].iter_rows(named=True)
    return {(r["cell"], r["point"]): r["rows"] for r in rows}


def reference(df: pl.DataFrame, loaded: ResolvedSpec, plan: Allocation, period: str | None) -> dict:
    """The contract row by row, for data in which no unit exceeds a bound (no truncation); and
    the input summary's counts under "summary". A quantile's histogram is {(cell, point): rows}
    (a weighted one's: the rows' weight steps, `_mass`)."""
    spec = loaded.spec
    keys = spec.key_columns
    cells = {row: i for i, row in enumerate(loaded.key_grid.iter_rows())} if keys else {(): 0}
    out: dict[str, Any] = {m.name: [0] * len(cells) for m in plan.measurements}
    out |= {q.statistic.name: Counter() for q in plan.quantiles}
    tallies = [units for a in plan.statistics for units in a.tallies()]
    out |= {units.name: [0] * len(cells) for units in tallies}
    summary = {"rows": df.height, "period_rows": 0, "unit_rows": 0, "keyed": Counter()}
    summary["missing"] = Counter()  # per column: rows of the period with no number in it
    for row in df.iter_rows(named=True):
        if spec.period is not None:
            when = row[spec.period.column]
            if when is None or f"{when.year:04d}-{when.month:02d}" != period:
                continue
        key = tuple(_as_key(row[k], loaded.key_dtype(k)) for k in keys)
        unit = _as_unit(row[spec.privacy_unit]) if spec.privacy_unit is not None else 0
        summary["period_rows"] += 1
        summary["unit_rows"] += unit is not None
        summary["keyed"].update(k for k, value in zip(keys, key, strict=True) if value is not None)
        summary["missing"].update(c for c, v in row.items() if v is None or _as_unit(v) is None)
        cell = cells.get(key)
        if cell is None or unit is None:
            continue
        for m in plan.measurements:
            out[m.name][cell] += 1 if m.counts_rows else _units(row, m)
        for q in plan.quantiles:
            point = _point(row[q.statistic.column], q)
            if point is not None:
                out[q.statistic.name][cell, point] += _mass(row, q)
        for units in tallies:
            [term] = units.factors
            assert isinstance(term, Reported)
            out[units.name][cell] += _reported(row, term)
    if spec.privacy_unit is None:
        summary["unit_rows"] = None
    return {**out, "summary": summary}


# --------------------------------------------------------------------------- data and cases


def synthetic(
    rows_per_unit: int = 3,
    groups_per_unit: int | None = None,
    rows_per_group: int | None = None,
    units: int = 400,
    seed: int = 11,
) -> pl.DataFrame:
    """Units within the given bounds (so nothing is truncated), keys partly null or outside the
    domains, values with nulls, NaN, ±inf, outliers and half-unit ties; survey weights `wt`
    with nulls, NaN, ±inf, negatives, zeros, weights above every declared bound and halves
    (whose products make ties). Test data, not noise."""
    rng = np.random.default_rng(seed)
    keys = [(r, a) for r in ["n", "s", "e", "x", None] for a in [1, 2, 3, 0, 7, None]]
    out: dict[str, list] = {"pid": [], "region": [], "age": []}
    for unit in range(1, units + 1):
        groups = rng.integers(1, (groups_per_unit or rows_per_unit) + 1)
        rows = []
        for index in rng.choice(len(keys), groups, replace=False):
            rows += [keys[index]] * int(rng.integers(1, (rows_per_group or 1) + 1))
        for region, age in rows[:rows_per_unit]:
            out["pid"].append(unit)
            out["region"].append(region)
            out["age"].append(age)
    n = len(out["pid"])
    cost = rng.normal(40, 60, n).round(3)
    special = [None, float("nan"), float("inf"), -float("inf"), 1e300, 0.125, 0.375, -0.125]
    picks = rng.random(n) < 0.15
    day0 = date(2024, 1, 1)
    frame = pl.DataFrame(
        {
            **out,
            "cost": [
                special[rng.integers(len(special))] if pick else c
                for pick, c in zip(picks, cost, strict=True)
            ],
            "visits": pl.Series(rng.integers(0, 30, n)).scatter(np.arange(0, n, 17), None),
            "flag": rng.random(n) < 0.3,
            "day": [day0 + timedelta(days=int(d)) for d in rng.integers(0, 91, n)],
            "at": [
                datetime(2024, 1, 31, 12) + timedelta(hours=int(h)) for h in rng.integers(0, 24, n)
            ],
        },
        schema_overrides={"age": pl.Int32, "cost": pl.Float64},
    )
    odd = [None, float("nan"), float("inf"), -float("inf"), -3.0, 0.0, 1e6, 0.5, 1.5, 2.5]
    weights = rng.gamma(2.0, 150.0, n).round(2)
    return frame.with_columns(
        wt=pl.Series(
            [
                odd[rng.integers(len(odd))] if pick else w
                for pick, w in zip(rng.random(n) < 0.2, weights, strict=True)
            ],
            dtype=pl.Float64,
        )
    )


def spec(**overrides: Any) -> dict:
    base: dict = {
        "name": "t",
        "source": "t",
        "privacy_unit": "pid",
        "max_rows_per_unit": 3,
        "group_by": [
            {"column": "region", "domain": {"values": ["n", "s", "e"]}},
            {"column": "age", "domain": {"min": 1, "max": 3}},
        ],
        "statistics": [
            {"name": "n", "kind": "count"},
            {"name": "cost", "kind": "sum", "column": "cost", "lower": 0, "upper": 100},
            {"name": "stay", "kind": "mean", "column": "cost", "lower": -10, "upper": 20},
            {"name": "visits", "kind": "sum", "column": "visits", "lower": 0, "upper": 20},
        ],
    }
    return {**base, **overrides}


@dataclass(frozen=True)
class Case:
    name: str
    load: Callable[[Path], ResolvedSpec]  # given a folder for keys files
    data: Callable[[], pl.DataFrame]
    periods: tuple[str | None, ...] = (None,)


def parsed(**overrides: Any) -> Callable[[Path], ResolvedSpec]:
    return lambda folder: parse_spec(spec(**overrides), base_dir=folder)


def joint_keys(folder: Path) -> ResolvedSpec:
    pl.DataFrame({"region": ["n", "n", "s", "e"], "age": [1, 2, 2, 3]}).write_csv(
        folder / "keys.csv"
    )
    return parse_spec(
        spec(group_by=[{"columns": ["region", "age"], "domain": {"file": "keys.csv"}}]),
        base_dir=folder,
    )


def narrow_keys(folder: Path) -> ResolvedSpec:
    pl.DataFrame({"age": pl.Series([0, 1, 2, 255], dtype=pl.UInt8)}).write_parquet(
        folder / "ages.parquet"
    )
    return parse_spec(
        spec(group_by=[{"column": "age", "domain": {"file": "ages.parquet"}}]), base_dir=folder
    )


def visits_within_bounds() -> pl.DataFrame:
    """The demo visits, cut to the spec's 4 rows per patient and month (so none is truncated)."""
    visits = generate_visits(n_patients=2_000)
    month = pl.col("visit_date").dt.month()
    return visits.filter(pl.int_range(pl.len()).over("patient_id", month) < 4)


def with_float_ages(df: pl.DataFrame) -> pl.DataFrame:
    """Ages as floats: whole ones (2.0) are keys, 2.5 and NaN are outside the domain."""
    fraction = pl.Series([0.0, 0.0, 0.5, float("nan")] * df.height)[: df.height]
    return df.with_columns(pl.col("age").cast(pl.Float64) + fraction)


PERIOD_SPEC = {"column": "day", "every": "month"}
WEIGHT = {"column": "wt", "upper": 800}
#: Quantiles whose grids put some of the data's values on half steps (0.125 at a step of 0.25
#: from −10), read a column with nulls, NaN and ±inf, and share a column with a sum.
QUANTILES = [
    {"name": "n", "kind": "count"},
    {"name": "cost", "kind": "sum", "column": "cost", "lower": 0, "upper": 100},
    {
        "name": "q",
        "kind": "quantile",
        "column": "cost",
        "lower": -10,
        "upper": 100,
        "resolution": 0.25,
        "p": [0.1, 0.5, 0.9],
    },
    {"name": "med", "kind": "median", "column": "visits", "lower": 1, "upper": 20, "resolution": 1},
]
CASES = [
    Case("grouped", parsed(), synthetic),
    Case("ungrouped", parsed(group_by=[]), synthetic),
    Case(
        "each_row_a_unit",
        parsed(privacy_unit=None, max_rows_per_unit=None),
        lambda: synthetic(rows_per_unit=1).drop("pid"),
    ),
    Case(
        "groups_and_rows_per_group",
        parsed(max_groups_per_unit=2, max_rows_per_group=2, max_rows_per_unit=4),
        lambda: synthetic(rows_per_unit=4, groups_per_unit=2, rows_per_group=2),
    ),
    Case("joint_domain", joint_keys, synthetic),
    Case(
        "mean_with_own_count_and_bounds_above_zero",
        parsed(
            statistics=[
                {"name": "avg", "kind": "mean", "column": "cost", "lower": 10, "upper": 20},
                {
                    "name": "c",
                    "kind": "sum",
                    "column": "cost",
                    "lower": -50,
                    "upper": 50,
                    "granularity": 0.25,
                },
            ]
        ),  # fmt: skip
        synthetic,
    ),
    Case(
        "boolean_domain",
        parsed(group_by=[{"column": "flag", "domain": {"values": [True, False]}}]),
        synthetic,
    ),
    Case("period_date", parsed(period=PERIOD_SPEC), synthetic, ("2024-02", "2024-03", "2023-12")),
    Case(
        "period_timestamp",
        parsed(period={"column": "at", "every": "month"}),
        synthetic,
        ("2024-01", "2024-02"),
    ),
    Case(
        "period_timestamp_utc",
        parsed(period={"column": "at", "every": "month"}),
        lambda: synthetic().with_columns(pl.col("at").dt.replace_time_zone("UTC")),
        ("2024-01", "2024-02"),
    ),
    Case(
        "repo_case_control_by_genotype",
        lambda _: load_spec(SPECS / "case_control_by_genotype.yaml"),
        generate_case_control,
    ),
    Case(
        "repo_case_control_by_region",
        lambda _: load_spec(SPECS / "case_control_by_region.yaml"),
        generate_case_control,
    ),
    Case(
        "repo_visits_monthly",
        lambda _: load_spec(SPECS / "visits_monthly.yaml"),
        visits_within_bounds,
        ("2024-01", "2024-12", "2025-01"),
    ),
    Case(
        "null_and_nan_units_are_dropped",
        parsed(),
        lambda: synthetic().with_columns(
            pl.when(pl.col("pid") % 5 == 0)
            .then(None)
            .when(pl.col("pid") % 7 == 0)
            .then(float("nan"))
            .otherwise(pl.col("pid"))
            .cast(pl.Float64)
            .alias("pid")
        ),
    ),
    Case("integral_floats_in_an_integer_domain", parsed(), lambda: with_float_ages(synthetic())),
    Case(
        "unsigned_and_decimal_columns",  # Spark reads parquet UINT64 as DECIMAL(20,0)
        parsed(),
        lambda: synthetic().with_columns(
            pl.col("age").cast(pl.UInt64).replace({7: 2**64 - 1}),
            (pl.col("visits") / 4).cast(pl.Decimal(12, 2)),
            pl.col("pid").cast(pl.Decimal(20, 0)),
        ),
    ),
    Case("survey_weight_on_the_release", parsed(survey_weight=WEIGHT), synthetic),
    Case(
        "shares_of_text_and_number_categories",
        parsed(
            group_by=[{"column": "age", "domain": {"min": 1, "max": 3}}],
            statistics=[
                {"name": "n", "kind": "count"},
                {"name": "north", "kind": "share", "column": "region", "categories": ["n", "x"]},
                {"name": "few", "kind": "share", "column": "visits", "categories": [0, 1, 2.0]},
                {
                    "name": "weighted",
                    "kind": "share",
                    "column": "region",
                    "categories": ["s"],
                    "survey_weight": WEIGHT,
                },
            ],
        ),
        synthetic,
    ),
    Case(
        "survey_weights_per_statistic",
        parsed(
            statistics=[
                {"name": "rows", "kind": "count"},
                {"name": "n", "kind": "count", "survey_weight": WEIGHT},
                {
                    "name": "cost",
                    "kind": "sum",
                    "column": "cost",
                    "lower": -10,
                    "upper": 50,
                    "granularity": 0.25,  # half-unit ties: weights of halves times 0.125, 0.375
                    "survey_weight": WEIGHT,
                },
                {
                    "name": "avg",  # bounds above 0: a weight of 0 still makes 0 reachable
                    "kind": "mean",
                    "column": "cost",
                    "lower": 10,
                    "upper": 20,
                    "survey_weight": {"column": "visits", "upper": 7.5},
                },
            ]
        ),
        synthetic,
    ),
    Case(
        "ratios_of_two_clamped_sums",
        parsed(
            statistics=[
                {"name": "cost", "kind": "sum", "column": "cost", "lower": -10, "upper": 50},
                {
                    "name": "per_visit",  # reuses cost; measures its denominator
                    "kind": "ratio",
                    "numerator": {"column": "cost", "lower": -10, "upper": 50},
                    "denominator": {"column": "visits", "lower": 0, "upper": 4},
                    "lower": -10,
                    "upper": 50,
                },
                {
                    "name": "weighted",
                    "kind": "ratio",
                    "numerator": {"column": "visits", "lower": 0, "upper": 4},
                    "denominator": {"column": "cost", "lower": 0, "upper": 50},
                    "lower": 0,
                    "upper": 10,
                    "survey_weight": WEIGHT,
                },
            ]
        ),
        synthetic,
    ),
    Case(
        "decimal_survey_weights",
        parsed(survey_weight=WEIGHT),
        lambda: synthetic().with_columns(
            pl.col("wt").fill_nan(None).clip(-1e4, 1e4).cast(pl.Decimal(12, 2))
        ),
    ),
    Case("quantiles", parsed(statistics=QUANTILES), synthetic),
    Case(
        "missing_values_dropped",  # bounds above 0 and around it, weighted and not
        parsed(
            statistics=[
                {"name": "n", "kind": "count"},
                {
                    "name": "cost",
                    "kind": "sum",
                    "column": "cost",
                    "lower": 10,
                    "upper": 50,
                    "missing": "drop",
                },
                {
                    "name": "avg",
                    "kind": "mean",
                    "column": "cost",
                    "lower": 10,
                    "upper": 50,
                    "missing": "drop",
                },
                {
                    "name": "wavg",
                    "kind": "mean",
                    "column": "cost",
                    "lower": -10,
                    "upper": 50,
                    "missing": "drop",
                    "survey_weight": WEIGHT,
                },
                {
                    "name": "q",
                    "kind": "quantile",
                    "column": "cost",
                    "lower": -10,
                    "upper": 100,
                    "resolution": 0.25,
                    "p": [0.1, 0.5],
                    "missing": "drop",
                },
                {
                    "name": "med",
                    "kind": "median",
                    "column": "visits",
                    "lower": 1,
                    "upper": 20,
                    "resolution": 1,
                    "missing": "drop",
                },
            ]
        ),  # fmt: skip
        synthetic,
    ),
    Case("quantiles_ungrouped", parsed(group_by=[], statistics=QUANTILES), synthetic),
    Case(  # the release's weight on the count, the sum and the quantile, and a median's own
        "weighted_quantiles",
        parsed(
            survey_weight=WEIGHT,
            statistics=[
                *QUANTILES[:3],
                QUANTILES[3] | {"survey_weight": {"column": "wt", "upper": 300.5}},
                QUANTILES[2] | {"name": "coarse", "weight_resolution": 0.5, "p": [0.5]},
            ],
        ),
        synthetic,
    ),
    Case(
        "quantiles_in_a_period_each_row_a_unit",
        parsed(privacy_unit=None, max_rows_per_unit=None, period=PERIOD_SPEC, statistics=QUANTILES),
        lambda: synthetic(rows_per_unit=1).drop("pid"),
        ("2024-02", "2023-12"),
    ),
    Case(
        "keys_outside_a_narrow_domain_type",
        narrow_keys,
        lambda: synthetic().with_columns(pl.col("age").cast(pl.Int64).replace({7: -1, 0: 300})),
    ),
]


ANSWERS = ["never", "once", "monthly", "weekly"]


def randomized_spec(mechanism: str, **more: Any) -> Callable[[Path], ResolvedSpec]:
    stat = {
        "name": "use",
        "kind": "randomized",
        "column": "use",
        "wave": "w",
        "domain": ANSWERS,
        "epsilon": "3/2",
        "mechanism": mechanism,
        "public_columns": ["region", "age"],
        **more,
    }
    return parsed(privacy_unit=None, max_rows_per_unit=None, period=PERIOD_SPEC, statistics=[stat])


def randomized_reports(mechanism: str, g: int | None = None) -> pl.DataFrame:
    """Each synthetic row a respondent with a report (seeded; none where every 13th did not
    answer), and some reports no randomizer gives and some seals of another configuration."""
    df = synthetic(rows_per_unit=1).drop("pid")
    randomizer = make_randomizer(ANSWERS, Fraction(3, 2), mechanism, g=g)  # type: ignore[arg-type]
    seeded = NoiseSource.seeded_for_tests(4)
    stream = ByteStream(byte_reader(seeded, allow_unsafe_noise=True))
    answers = [ANSWERS[i % 4] for i in range(df.height)]
    reports = [str(r) for r in randomizer.randomize_all(answers, stream)]
    odd = {"krr": ["sometimes", "NEVER"], "oue": ["01x1", "10101"], "olh": ["0:1:1", "1:2:9"]}
    for i in range(0, df.height, 29):
        reports[i] = odd[mechanism][i % 2]
    sealed = randomizer.config(wave="w", question="use")["wave_hash"]
    return df.with_columns(
        use=pl.Series([None if i % 13 == 0 else r for i, r in enumerate(reports)]),
        wave_hash=pl.Series([None if i % 31 == 0 else sealed for i in range(df.height)]),
    )


CASES += [
    Case(
        f"randomized_answers_{mechanism}",
        randomized_spec(mechanism, **more),
        lambda mechanism=mechanism, more=more: randomized_reports(mechanism, more.get("g")),
        ("2024-02", "2023-12"),
    )
    for mechanism, more in (("krr", {}), ("oue", {}), ("olh", {"g": 3}))
]


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_exact_aggregates_follow_the_contract(case: Case, engine: Engine, tmp_path: Path) -> None:
    loaded = case.load(tmp_path)
    df = case.data()
    path = tmp_path / "input.parquet"
    df.write_parquet(path)
    plan = allocation_of(loaded)
    keys = loaded.spec.key_columns
    for period in case.periods:
        exact = run_engine(engine, path, loaded, plan, period)
        expected = reference(df, loaded, plan, period)
        assert exact.keys.equals(loaded.key_grid)
        for m in plan.measurements:
            assert values(exact, m) == expected[m.name], (period, m.name)
        for q in plan.quantiles:
            assert histogram_of(exact, q) == expected[q.statistic.name], (period, q.statistic.name)
        for units in (u for a in plan.statistics for u in a.tallies()):
            got = [int(v) for v in exact.values[units.name]]
            assert got == expected[units.name], (period, units.name)
        facts = exact.summary
        assert (facts.rows, facts.period_rows, facts.unit_rows) == (
            expected["summary"]["rows"],
            expected["summary"]["period_rows"],
            expected["summary"]["unit_rows"],
        )
        assert facts.keyed_rows == {k: expected["summary"]["keyed"][k] for k in keys}
        missing = expected["summary"]["missing"]
        assert facts.missing_rows == {c: missing[c] for c in facts.missing_rows}, period
        # not vacuous: every period but a case's last (where some cases test an empty month)
        vectors = [m.name for m in plan.measurements] + [
            u.name for a in plan.statistics for u in a.tallies()
        ]
        assert any(any(expected[v]) for v in vectors) or period == case.periods[-1]


# --------------------------------------------------------------------------- (b) truncation


def per_unit(rows: dict[tuple[int, str], int], units: int) -> pl.DataFrame:
    """rows[(unit, region)] rows for each unit and region; `who` repeats the unit as a key."""
    out: dict[str, list] = {"pid": [], "who": [], "region": [], "w": []}
    for (unit, region), count in rows.items():
        for i in range(count):
            out["pid"].append(unit)
            out["who"].append(unit)
            out["region"].append(region)
            out["w"].append(2**i)
    return pl.DataFrame(out)  # in unit order: keeping the first rows in file order would show


def unit_spec(units: int, regions: list[str] | None = None, **bounds: int) -> ResolvedSpec:
    group_by: list[dict] = [{"column": "who", "domain": {"min": 1, "max": units}}]
    if regions:
        group_by.append({"column": "region", "domain": {"values": regions}})
    return parse_spec(
        spec(
            group_by=group_by,
            statistics=[
                {"name": "n", "kind": "count"},
                {
                    "name": "w",
                    "kind": "sum",
                    "column": "w",
                    "lower": 0,
                    "upper": 16,
                    "granularity": 1,
                },
            ],  # fmt: skip
            **bounds,
        )
    )


def counts(
    engine: Engine, df: pl.DataFrame, loaded: ResolvedSpec, tmp_path: Path, runs: int
) -> list[pl.DataFrame]:
    """The exact aggregates of `runs` releases (each with a fresh salt)."""
    path = tmp_path / "units.parquet"
    df.write_parquet(path)
    plan = allocation_of(loaded)
    exacts = (run_engine(engine, path, loaded, plan, None) for _ in range(runs))
    return [exact.keys.with_columns(exact.values.values()) for exact in exacts]


def test_every_unit_keeps_min_of_its_rows_and_r(engine: Engine, tmp_path: Path) -> None:
    units = 64
    rows = {(u, "n"): 1 + u % 8 for u in range(1, units + 1)}
    loaded = unit_spec(units, max_rows_per_unit=3)
    for grid in counts(engine, per_unit(rows, units), loaded, tmp_path, runs=3):
        assert grid.get_column("n").to_list() == [min(1 + u % 8, 3) for u in range(1, units + 1)]


def test_groups_per_unit_and_rows_per_group_are_bounded(engine: Engine, tmp_path: Path) -> None:
    """Unit u has k = 1 + u%4 groups of m = 1 + (u//4)%3 rows; G = 2, Rg = 2, R = 3: at most
    G groups and Rg rows each, and exactly min(R, min(G, k)·min(Rg, m)) rows in all."""
    units, regions = 48, ["a", "b", "c", "d"]
    rows = {
        (u, region): 1 + (u // 4) % 3
        for u in range(1, units + 1)
        for region in regions[: 1 + u % 4]
    }
    loaded = unit_spec(
        units, regions, max_groups_per_unit=2, max_rows_per_group=2, max_rows_per_unit=3
    )
    for grid in counts(engine, per_unit(rows, units), loaded, tmp_path, runs=3):
        assert grid.get_column("n").max() <= 2
        for u, cells in grid.group_by("who", maintain_order=True):
            unit = u[0]
            kept = cells.get_column("n")
            assert (kept > 0).sum() <= 2, unit
            k, m = 1 + unit % 4, 1 + (unit // 4) % 3
            assert kept.sum() == min(3, min(2, k) * min(2, m)), unit


# --------------------------------------------------------------------------- (c) uniform choice

#: Per statistical check; 8 such checks (2 per test): family false-alarm rate ≤ 8e-4. The tests
#: draw many units under 2 salts rather than fewer under more: the same 1500 choices for the χ²,
#: 750 chances to repeat (a choice that ignored the salt repeats all 750, against ≈ 75-125), and
#: each salt is a pass over the data (a Spark job).
FALSE_ALARM = 1e-4


def assert_uniform_and_fresh(choices: list[list], categories: int) -> None:
    """`choices[run][unit]`: one of `categories` equally likely choices per unit and salt.

    χ² of all choices against uniform; and as many repeats of a unit's first-run choice in the
    later runs as independent salts give (binomial, p = 1/categories): a choice that ignored the
    salt would repeat every time.
    """
    from scipy.stats import binom, chisquare

    counts = Counter(choice for run in choices for choice in run)
    assert len(counts) <= categories
    frequencies = list(counts.values()) + [0] * (categories - len(counts))
    assert chisquare(frequencies).pvalue > FALSE_ALARM, counts
    first, later = choices[0], choices[1:]
    repeats = sum(a == b for run in later for a, b in zip(first, run, strict=True))
    trials = len(first) * len(later)
    assert binom.sf(repeats - 1, trials, 1 / categories) > FALSE_ALARM, (repeats, trials)


def test_kept_rows_are_a_uniform_choice(engine: Engine, tmp_path: Path) -> None:
    """750 units of 5 rows (w = 1, 2, 4, 8, 16), R = 2, under 2 salts: each unit's sum names the
    pair it kept, one of 10 equally likely pairs."""
    units = 750
    loaded = unit_spec(units, max_rows_per_unit=2)
    rows = {(u, "n"): 5 for u in range(1, units + 1)}
    choices = []
    for grid in counts(engine, per_unit(rows, units), loaded, tmp_path, runs=2):
        assert set(grid.get_column("n")) == {2}
        choices.append(grid.get_column("w").to_list())
    assert {w for run in choices for w in run} <= {2**i + 2**j for i in range(5) for j in range(i)}
    assert_uniform_and_fresh(choices, 10)


def test_kept_groups_are_a_uniform_choice(engine: Engine, tmp_path: Path) -> None:
    """750 units with one row in each of 4 groups, G = 2, under 2 salts: 6 equally likely pairs."""
    units, regions = 750, ["a", "b", "c", "d"]
    rows = {(u, region): 1 for u in range(1, units + 1) for region in regions}
    loaded = unit_spec(
        units, regions, max_groups_per_unit=2, max_rows_per_group=1, max_rows_per_unit=2
    )
    choices = []
    for grid in counts(engine, per_unit(rows, units), loaded, tmp_path, runs=2):
        kept = grid.filter(pl.col("n") > 0).group_by("who").agg(pl.col("region").sort())
        assert kept.height == units and set(kept.get_column("region").list.len()) == {2}
        choices.append([tuple(pair) for pair in kept.sort("who").get_column("region")])
    assert_uniform_and_fresh(choices, 6)
