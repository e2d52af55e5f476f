"""The polars engine: one lazy, streaming plan from confidential rows to exact Int128 aggregates.

One direction: select the spec's columns under internal names → type them non-strictly → drop
rows with a null unit → period filter → drop keys outside the public domain → bound each unit's
contributions by a salted hash → clamp and discretize → exact group-by → lay the result on the
full key grid (missing groups are 0). Every step is total: no value in the data can make it
fail, overflow, or change anything but the aggregates.

Internal column names start with ':'; the user's column names appear only in the first select,
so no input column can collide with them.
"""

from __future__ import annotations

import polars as pl

from dprelease.accounting import Measurement, Plan
from dprelease.engines import (
    DataSource,
    ExactAggregates,
    scan,
    text_columns,
    validate_schema,
    withholding_engine_errors,
)
from dprelease.spec import LoadedSpec, Month, StatisticKind

_UNIT = ":unit"
_PERIOD = ":period"
_ORDER = ":order"
_ROWS = ":rows"


def _keys(loaded: LoadedSpec) -> dict[str, str]:
    """Internal name of each key column."""
    return {column: f":key{i}" for i, column in enumerate(loaded.spec.key_columns)}


def _value(index: int) -> str:
    return f":value{index}"


def _units(index: int) -> str:
    return f":units{index}"


def _as_key(column: str, data: pl.DataType, domain: pl.DataType) -> pl.Expr:
    """A key typed as its domain's keys; whatever does not convert exactly becomes null."""
    expr = pl.col(column)
    if domain == pl.Boolean and data == pl.String:
        text = expr.str.to_lowercase()
        return pl.when(text == "true").then(True).when(text == "false").then(False)
    if not domain.is_integer() or data.is_integer():
        return expr.cast(domain, strict=False)
    number = expr.cast(pl.Float64, strict=False)
    integral = pl.when(number == number.round()).then(number).cast(domain, strict=False)
    return pl.coalesce(expr.cast(domain, strict=False), integral) if data == pl.String else integral


def _as_date(column: str, data: pl.DataType) -> pl.Expr:
    """Date or Datetime as is; text parsed as an ISO date (a time after it is ignored)."""
    expr = pl.col(column)
    if data == pl.String:
        return expr.str.slice(0, 10).str.to_date("%Y-%m-%d", strict=False)
    return expr.cast(pl.Date) if data == pl.Null else expr


def _units_of(m: Measurement, value: str) -> pl.Expr:
    """The value as a number, null/NaN filled by the nulls rule, clamped, in integer units.

    A null or NaN (or text that does not parse) counts as 0 when 0 lies in [lower, upper], else
    as lower; ±inf is clamped.
    """
    assert m.lower is not None and m.upper is not None
    fill = 0.0 if m.lower <= 0.0 <= m.upper else m.lower
    number = pl.col(value).cast(pl.Float64, strict=False).fill_nan(None).fill_null(fill)
    units = (number.clip(m.lower, m.upper) / float(m.granularity)).round()
    return units.cast(pl.Int64, strict=False).clip(m.lower_units, m.upper_units)


def _not_null_unit(data: pl.DataType) -> pl.Expr:
    unit = pl.col(_UNIT)
    return unit.is_not_null() & unit.is_not_nan() if data.is_float() else unit.is_not_null()


def _bounded(lf: pl.LazyFrame, loaded: LoadedSpec, salt: int) -> pl.LazyFrame:
    """Per unit, keep a random choice of rows: ≤ G groups, ≤ R_g rows per group, ≤ R rows.

    The order is a salted hash of what the row holds, so the rows one unit keeps depend on its
    own rows only, never on file order or on other units. Rows identical in every column read
    are interchangeable, so ties among them do not matter.
    """
    spec = loaded.spec
    keys = list(_keys(loaded).values())
    lf = lf.with_columns(pl.struct(pl.all()).hash(seed=salt).alias(_ORDER))
    if spec.max_groups_per_unit is not None:
        group_order = pl.struct(_UNIT, *keys).hash(seed=salt).rank("dense").over(_UNIT)
        lf = lf.filter(group_order <= spec.max_groups_per_unit)
    if spec.max_rows_per_group is not None:
        lf = lf.filter(pl.col(_ORDER).rank("ordinal").over(_UNIT, *keys) <= spec.max_rows_per_group)
    return lf.filter(pl.col(_ORDER).rank("ordinal").over(_UNIT) <= spec.rows_per_unit)


def _sums(plan: Plan) -> list[Measurement]:
    return [m for m in plan.measurements if m.kind is StatisticKind.SUM]


def _lazy_plan(
    data: DataSource, loaded: LoadedSpec, plan: Plan, month: Month | None, salt: int
) -> pl.LazyFrame:
    """The lazy aggregation over observed in-domain groups, checked against the declared schema."""
    lf = scan(data)
    schema = lf.collect_schema()
    validate_schema(schema, loaded, text_columns(data))
    spec = loaded.spec
    keys = _keys(loaded)
    summed = list(dict.fromkeys(str(m.column) for m in _sums(plan)))
    selected = [
        *(_as_key(c, schema[c], loaded.key_dtype(c)).alias(keys[c]) for c in spec.key_columns),
        *(pl.col(c).alias(_value(i)) for i, c in enumerate(summed)),
    ]
    if spec.privacy_unit is not None:
        selected.append(pl.col(spec.privacy_unit).alias(_UNIT))
    if spec.period is not None:
        selected.append(_as_date(spec.period.column, schema[spec.period.column]).alias(_PERIOD))
    lf = lf.select(selected)
    if spec.privacy_unit is not None:  # never one shared allowance for all unknown units
        lf = lf.filter(_not_null_unit(schema[spec.privacy_unit]))
    if month is not None:
        period = pl.col(_PERIOD)
        lf = lf.filter((period.dt.year() == month.year) & (period.dt.month() == month.month))
    for domain in loaded.domains:  # keys outside the public domain (or null) are dropped here
        if domain.width == 1:
            (column,) = domain.columns
            lf = lf.filter(pl.col(keys[column]).is_in(domain.get_column(column).implode()))
        else:
            names = {column: keys[column] for column in domain.columns}
            lf = lf.join(domain.rename(names).lazy(), on=list(names.values()), how="semi")
    if spec.privacy_unit is not None:
        lf = _bounded(lf, loaded, salt)
    sums = _sums(plan)
    lf = lf.with_columns(
        _units_of(m, _value(summed.index(str(m.column)))).alias(_units(i))
        for i, m in enumerate(sums)
    )
    aggregations = [
        pl.len().alias(_ROWS),
        *(pl.col(_units(i)).cast(pl.Int128).sum() for i in range(len(sums))),
    ]
    return lf.group_by(keys.values()).agg(aggregations) if keys else lf.select(aggregations)


class PolarsEngine:
    """The single-machine engine (streaming polars)."""

    name = "polars"

    def check(self, data: DataSource, loaded: LoadedSpec, plan: Plan, month: Month | None) -> None:
        """Validate the declared schema and let polars type the whole plan; reads no rows."""
        with withholding_engine_errors("planning the aggregation"):
            _lazy_plan(data, loaded, plan, month, salt=0).collect_schema()

    def aggregate(
        self, data: DataSource, loaded: LoadedSpec, plan: Plan, month: Month | None, salt: int
    ) -> ExactAggregates:
        """Run the plan (streaming) and lay it on the full public key grid, missing groups = 0."""
        with withholding_engine_errors(f"aggregating the input of release {loaded.spec.name!r}"):
            observed = _lazy_plan(data, loaded, plan, month, salt).collect(engine="streaming")
        grid = loaded.key_grid()
        if grid.width:
            internal = grid.rename(_keys(loaded))
            observed = internal.join(
                observed, on=internal.columns, how="left", maintain_order="left"
            )
        column = {m.name: _units(i) for i, m in enumerate(_sums(plan))}
        values = {
            m.name: observed.get_column(column.get(m.name, _ROWS))
            .fill_null(0)
            .cast(pl.Int128)
            .alias(m.name)
            for m in plan.measurements
        }
        return ExactAggregates(grid, values)
