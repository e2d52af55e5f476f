"""The survey's sampling error beside the noise: a combined 95% margin of error per row.

The noise is drawn after the sample and independently of it, with mean 0, so the two errors are
independent and their variances add. The combined margin adds the two *margins* in quadrature,
√(moe_noise² + (1.96·SE_sampling)²): with Gaussian noise that is 1.96 × the combined standard
error √(SE_noise² + SE_sampling²); with Laplace noise, whose tails are heavier, it still covers at
least 95% (95.0–95.5% for every ratio of the two; tests/unit/test_weights.py), where 1.96 × the
combined standard error would cover only 93.8%.

The sampling SE comes from public inputs and released (noisy) values only, never from the
confidential file, where a statistic of the data would leak un-noised: standard errors already
published per row, or the survey's design effect deff times the SRS variance of the estimate
(Kish), with n the row's released number of respondents:

- a mean ȳ (a share p̂): SE² = deff · S² / n
- a weighted count N̂:   SE² = deff · N̂² · (1 − N̂/N) / n
- a weighted sum Ŷ:     SE² = deff · (N̂² · S² + Ŷ² · (1 − N̂/N)) / n,   N̂ its row's weighted count

S is the column's population standard deviation from public sources (`element_sd`), else the
largest a variable in [lower, upper] with mean ȳ can have, S² = (ȳ − lower)(upper − ȳ)
(Bhatia–Davis; p(1 − p) for a 0/1 column), with ȳ the released mean (for a sum, Ŷ/N̂). Without
the population size N the factor 1 − N̂/N is left out, which only overstates the error.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import polars as pl

from dprelease.publication._columns import ValueColumn
from dprelease.spec import PublishedAs, ReleaseSpec, SamplingInput, weighted_count_of
from dprelease.statement import SamplingEntry

#: The standard normal's 97.5% point: the sampling error's 95% margin is 1.96 SE.
Z95 = 1.96


def combined_margins(
    table: pl.DataFrame,
    columns: Sequence[ValueColumn],
    spec: ReleaseSpec,
    published: Mapping[str, pl.DataFrame],
) -> tuple[pl.DataFrame, list[SamplingEntry]]:
    """`table` with each sampled statistic's `<statistic>_moe95_combined` after its `_moe95`
    (null where the sampling SE is undefined: no respondents, no value), and what the manifest
    says of each. `published`: the standard errors files, by statistic, as resolved."""
    entries = []
    table = table.clone()  # insert_column works in place: never on the caller's table
    for column in columns:
        sampling = (spec.sampling or {}).get(column.statistic)
        if sampling is None or column.combined is None or column.moe is None:
            continue
        if sampling.standard_errors is not None:
            se = _published(table, spec, published[column.statistic], sampling)
        else:
            se = _from_design(table, column, spec, sampling)
        noise = table.get_column(column.moe).cast(pl.Float64).to_numpy()
        with np.errstate(invalid="ignore"):
            combined = _up_two_digits(np.hypot(noise, Z95 * se))
        series = pl.Series(column.combined, combined, dtype=pl.Float64).fill_nan(None)
        at = table.columns.index(column.moe) + 1
        table = table.insert_column(at, series)
        entries.append(_entry(column, spec, sampling))
    return table, entries


def _from_design(
    table: pl.DataFrame, column: ValueColumn, spec: ReleaseSpec, sampling: SamplingInput
) -> np.ndarray:
    """deff × the SRS variance, from released values and public inputs (module docstring)."""
    assert sampling.design_effect is not None and sampling.respondents is not None
    n = table.get_column(sampling.respondents).cast(pl.Float64).to_numpy()
    value = table.get_column(column.column).cast(pl.Float64).fill_null(np.nan).to_numpy()
    fraction = _outside(sampling)
    with np.errstate(divide="ignore", invalid="ignore"):
        if column.published_as is PublishedAs.MEAN:
            variance = _element_variance(value, column, sampling)
        elif column.provides == "count":
            total = np.maximum(value, 0.0)
            variance = total**2 * fraction(total)
        else:  # a weighted sum, over its row's weighted count
            name = _count_of(spec, column)
            assert name is not None  # the spec refuses a sum without one
            count = np.maximum(table.get_column(name).cast(pl.Float64).to_numpy(), 0.0)
            mean = np.where(count > 0, value / count, np.nan)
            variance = count**2 * _element_variance(mean, column, sampling) + value**2 * fraction(
                count
            )
        se = np.sqrt(sampling.design_effect * variance / n)
    return np.where((n > 0) & np.isfinite(se), se, np.nan)


def _count_of(spec: ReleaseSpec, column: ValueColumn) -> str | None:
    """The weighted count of a sum's rows (the spec refuses a sampled sum without one)."""
    return weighted_count_of(spec, next(s for s in spec.statistics if s.name == column.statistic))


def _outside(sampling: SamplingInput):  # type: ignore[no-untyped-def]
    """1 − N̂/N within [0, 1] (1 without N: the bound that only overstates)."""
    population = sampling.population

    def fraction(total: np.ndarray) -> np.ndarray:
        if population is None:
            return np.ones_like(total)
        return np.clip(1.0 - total / population, 0.0, 1.0)

    return fraction


def _element_variance(mean: np.ndarray, column: ValueColumn, sampling: SamplingInput) -> np.ndarray:
    """S²: the public standard deviation's square, else the Bhatia–Davis bound for the mean."""
    if sampling.element_sd is not None:
        return np.where(np.isfinite(mean), sampling.element_sd**2, np.nan)
    assert column.lower is not None and column.upper is not None
    inside = np.clip(mean, column.lower, column.upper)
    return (inside - column.lower) * (column.upper - inside)


def _published(
    table: pl.DataFrame, spec: ReleaseSpec, standard_errors: pl.DataFrame, sampling: SamplingInput
) -> np.ndarray:
    """The published SE of each row (its keys, and level with margins), matched by key."""
    assert sampling.standard_errors is not None
    keys = [c for c in standard_errors.columns if c != "_se"]
    if not keys:  # an ungrouped release: its one row
        return np.full(table.height, float(standard_errors.get_column("_se")[0]))
    joined = table.select(keys).join(standard_errors, on=keys, how="left", nulls_equal=True)
    return joined.get_column("_se").cast(pl.Float64).fill_null(np.nan).to_numpy()


def _up_two_digits(values: np.ndarray) -> np.ndarray:
    """Each margin rounded up at the place of its second significant digit (never understated,
    no digit the errors leave meaningless)."""
    out = np.full(values.shape, np.nan)
    positive = np.isfinite(values) & (values > 0)
    places = 1 - np.floor(np.log10(values[positive]))
    scale = 10.0**places
    out[positive] = np.ceil(values[positive] * scale * (1 - 1e-12)) / scale
    out[np.isfinite(values) & (values == 0)] = 0.0
    return out


def _entry(column: ValueColumn, spec: ReleaseSpec, sampling: SamplingInput) -> SamplingEntry:
    """The manifest's words for one statistic's combined margin."""
    margin = (
        f"{column.combined} = √({column.moe}² + (1.96·SE)²), rounded up at its second "
        "significant digit: the noise's and the sampling's errors are independent"
    )
    if sampling.standard_errors is not None:
        inputs = f"standard errors published per row ({sampling.standard_errors.file})"
        return SamplingEntry(
            statistic=column.statistic,
            column=str(column.combined),
            inputs=inputs,
            recipe=f"SE as published; {margin}",
        )
    population = "" if sampling.population is None else f", population N = {sampling.population:g}"
    sd = (
        f"element SD S = {sampling.element_sd:g}"
        if sampling.element_sd is not None
        else f"S² = (ȳ − {column.lower})({column.upper} − ȳ), the most the bounds allow"
    )
    inputs = (
        f"design effect {sampling.design_effect:g}, respondents per row from "
        f"{sampling.respondents!r} (released){population}"
    )
    if column.published_as is PublishedAs.MEAN:
        recipe = f"SE² = deff · S² / n, {sd}"
    elif column.provides == "count":
        recipe = "SE² = deff · N̂² · (1 − N̂/N) / n" + ("" if sampling.population else ", N̂/N = 0")
    else:
        name = _count_of(spec, column)
        recipe = f"SE² = deff · (N̂² · S² + Ŷ² · (1 − N̂/N)) / n, N̂ from {name!r}, ȳ = Ŷ/N̂, {sd}" + (
            "" if sampling.population else ", N̂/N = 0"
        )
    return SamplingEntry(
        statistic=column.statistic,
        column=str(column.combined),
        inputs=inputs,
        recipe=f"{recipe}; {margin}",
    )
