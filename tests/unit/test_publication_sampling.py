"""The sampling error beside the noise: `<statistic>_moe95_combined` from public inputs and
released values only, by the recipe of each kind; tested against hand computation, and by
coverage on simulated simple random samples with exact Laplace noise added."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

import dprelease as dp
from dprelease.mechanism.noise import NoiseSource, discrete_laplace, laplace_moe95
from dprelease.publication import Z95, combined_margins, value_columns

WEIGHT = {"column": "w", "upper": 1000}


def spec_of(sampling: dict, **extra: object) -> dp.ReleaseSpec:
    return dp.ReleaseSpec.model_validate(
        {
            "name": "s",
            "source": "s",
            "statistics": [
                {"name": "n", "kind": "count"},
                {"name": "people", "kind": "count", "survey_weight": WEIGHT},
                {"name": "total", "kind": "sum", "column": "y", "lower": 0, "upper": 10,
                 "survey_weight": WEIGHT},
                {"name": "share", "kind": "mean", "column": "b", "lower": 0, "upper": 1,
                 "survey_weight": WEIGHT},
            ],
            "sampling": sampling,
            **extra,
        }
    )  # fmt: skip


def combined(spec: dp.ReleaseSpec, table: pl.DataFrame) -> pl.DataFrame:
    out, entries = combined_margins(table, value_columns(spec), spec, {})
    assert sorted(e.statistic for e in entries) == sorted(spec.sampling or {})
    return out


def released(**columns: list[float]) -> pl.DataFrame:
    return pl.DataFrame(
        {name: pl.Series(values, dtype=pl.Float64) for name, values in columns.items()}
    )


def test_each_kinds_recipe_is_deff_times_the_srs_variance() -> None:
    design = {"design_effect": 2.0, "respondents": "n"}
    spec = spec_of(
        {
            "share": design,
            "people": {**design, "population": 1_000_000},
            "total": {**design, "element_sd": 3.0},
        }
    )
    table = released(
        n=[400.0, 100.0], n_moe95=[9.0, 9.0],
        people=[200_000.0, 50_000.0], people_moe95=[900.0, 900.0],
        total=[800_000.0, 300_000.0], total_moe95=[9_000.0, 9_000.0],
        share=[0.3, 0.9], share_moe95=[0.02, 0.05],
    ).with_columns(pl.col("n").cast(pl.Int64))  # fmt: skip
    out = combined(spec, table)
    for row, got in enumerate(out.iter_rows(named=True)):
        n = table["n"][row]
        p = table["share"][row]
        se_share = math.sqrt(2.0 * p * (1 - p) / n)  # Bhatia–Davis: p(1 − p) for [0, 1]
        N = table["people"][row]
        se_people = math.sqrt(2.0 * N**2 * (1 - N / 1_000_000) / n)
        Y = table["total"][row]
        se_total = math.sqrt(2.0 * (N**2 * 3.0**2 + Y**2) / n)  # no population: factor 1
        for name, se in (("share", se_share), ("people", se_people), ("total", se_total)):
            exact = math.hypot(table[f"{name}_moe95"][row], Z95 * se)
            published = got[f"{name}_moe95_combined"]
            assert exact <= published <= exact * 1.1, name  # rounded up at two digits
    assert out.columns.index("share_moe95_combined") == out.columns.index("share_moe95") + 1


def test_the_bounds_give_the_largest_variance_when_no_sd_is_published() -> None:
    """A mean in [0, 10] at 2 has S² ≤ (2 − 0)(10 − 2) = 16."""
    spec = spec_of({"share": {"design_effect": 1.0, "respondents": "n"}})
    spec = spec.model_copy(
        update={
            "statistics": [
                *spec.statistics[:3],
                spec.statistics[3].model_copy(update={"upper": 10.0}),
            ]
        }
    )
    table = released(n=[100.0], share=[2.0], share_moe95=[0.0]).with_columns(
        pl.col("n").cast(pl.Int64)
    )
    out = combined(spec, table)
    assert out["share_moe95_combined"][0] == pytest.approx(Z95 * math.sqrt(16 / 100), rel=0.05)


def test_no_respondents_or_no_value_leaves_the_combined_margin_blank() -> None:
    spec = spec_of({"share": {"design_effect": 1.0, "respondents": "n"}})
    table = pl.DataFrame(
        {"n": [0, -3, 50], "share": [0.5, 0.5, None], "share_moe95": [0.1, 0.1, None]},
        schema_overrides={"share": pl.Float64, "share_moe95": pl.Float64},
    )
    assert combined(spec, table)["share_moe95_combined"].to_list() == [None, None, None]


def test_published_standard_errors_add_in_quadrature() -> None:
    spec = spec_of({"share": {"standard_errors": {"file": "se.csv"}}})
    table = released(share=[0.3, 0.5], share_moe95=[0.03, 0.04])
    keys = pl.DataFrame({"_se": [0.02, 0.0]})  # an ungrouped table: no key columns to match
    out, _ = combined_margins(table.head(1), value_columns(spec), spec, {"share": keys.head(1)})
    assert out["share_moe95_combined"][0] == pytest.approx(math.hypot(0.03, Z95 * 0.02), rel=0.03)


def _coverage(truth: float, value: np.ndarray, margin: np.ndarray) -> float:
    return float(np.mean(np.abs(value - truth) <= margin))


@pytest.mark.parametrize("kind", ["share", "people", "total"])
def test_the_combined_margin_covers_the_population_value_in_95_percent(kind: str) -> None:
    """4,000 simple random samples (n = 2,000 of N = 200,000, deff 1) of a population with a
    domain holding 20% of it; each estimate gets exact discrete Laplace noise whose margin is
    about the sampling error's, and the recipe's combined margin must cover the population's
    value in at least 94% of the samples (the binomial SE of the rate is 0.35%: a false alarm
    below 1e-3 when the true coverage is 95%)."""
    rng = np.random.default_rng(2026)
    N, n, reps = 200_000, 2_000, 4_000
    in_domain = rng.random(N) < 0.2
    y = np.where(in_domain, rng.gamma(2.0, 1.5, N).clip(0, 10), 0.0)
    b = (rng.random(N) < 0.35) & in_domain
    truth = {"people": in_domain.sum(), "total": y.sum(), "share": b.sum() / in_domain.sum()}
    rows: dict[str, list[float]] = {key: [] for key in ("n", "people", "total", "share")}
    for _ in range(reps):
        sample = rng.choice(N, n, replace=False)
        weight = N / n
        dom = in_domain[sample]
        rows["n"].append(float(dom.sum()))
        rows["people"].append(weight * dom.sum())
        rows["total"].append(weight * y[sample].sum())
        rows["share"].append(b[sample].sum() / max(dom.sum(), 1))
    source = NoiseSource.seeded_for_tests(31)
    scale = {"people": 700.0, "total": 3000.0, "share": 0.005}  # Laplace scale, value units
    units = {"people": 100.0, "total": 100.0, "share": 0.0001}  # the noise's integer unit
    table = {"n": np.array(rows["n"])}
    for key in ("people", "total", "share"):
        b_units = scale[key] / units[key]
        noise = discrete_laplace(b_units, reps, source) * units[key]
        table[key] = np.array(rows[key]) + noise
        table[f"{key}_moe95"] = np.full(reps, laplace_moe95(b_units) * units[key])
    sd = float(y[in_domain].std())
    spec = spec_of(
        {
            "share": {"design_effect": 1.0, "respondents": "n", "population": N},
            "people": {"design_effect": 1.0, "respondents": "n", "population": N},
            "total": {"design_effect": 1.0, "respondents": "n", "population": N, "element_sd": sd},
        }
    )
    frame = pl.DataFrame(table).with_columns(pl.col("n").cast(pl.Int64))
    out = combined(spec, frame)
    margin = out[f"{kind}_moe95_combined"].to_numpy()
    noise_only = out[f"{kind}_moe95"].to_numpy()
    value = out[kind].to_numpy()
    assert _coverage(truth[kind], value, margin) >= 0.94
    assert _coverage(truth[kind], value, noise_only) < 0.9  # the noise's margin alone falls short


def test_a_share_kind_has_a_means_sampling_error_of_its_indicator() -> None:
    """A `kind: share` is the mean of a 0/1 indicator: SE² = deff · p̂(1 − p̂) / n, as a mean in
    [0, 1] (it went down a total's recipe before, and failed for want of bounds)."""
    spec = dp.ReleaseSpec.model_validate(
        {
            "name": "s",
            "source": "s",
            "statistics": [
                {"name": "n", "kind": "count"},
                {"name": "people", "kind": "count", "survey_weight": WEIGHT},
                {"name": "insured", "kind": "share", "column": "ins", "categories": ["yes"],
                 "survey_weight": WEIGHT},
            ],
            "sampling": {"insured": {"design_effect": 1.5, "respondents": "n"}},
        }
    )  # fmt: skip
    table = released(n=[400.0], insured=[0.2], insured_moe95=[0.01]).with_columns(
        pl.col("n").cast(pl.Int64)
    )
    out = combined(spec, table)
    exact = math.hypot(0.01, Z95 * math.sqrt(1.5 * 0.2 * 0.8 / 400))
    assert exact <= out["insured_moe95_combined"][0] <= exact * 1.1
