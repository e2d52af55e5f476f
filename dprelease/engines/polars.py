"""The polars engine: one lazy, streaming plan from confidential rows to exact Int128 aggregates.

One direction: select the spec's columns under internal names → type them non-strictly → (the
private input summary branches off here) → drop rows with a null unit → period filter → drop keys
outside the public domain → bound each unit's contributions by a salted hash → clamp and
discretize → exact group-by → lay the result on the full key grid (missing groups are 0); the
summary and the aggregation are collected together, so the input is read once. Every step is
total: no value in the data can make it fail, overflow, or change anything but the aggregates.

Internal column names start with ':'; the user's column names appear only in the first select,
so no input column can collide with them.
"""

from __future__ import annotations

import polars as pl

from dprelease.accounting import Measurement, Plan
from dprelease.engines import (
    DataSource,
    ExactAggregates,
    InputSummary,
    fingerprint,
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
_ROW = ":row"
#: The fingerprint's hash seed is fixed (not the per-release salt): fingerprints of the same
#: rows must agree across runs. Polars' hash may change between versions, hence the scheme.
FINGERPRINT_SEED = 0x6470_7265_6C65_6173
FINGERPRINT_SCHEME = f"polars-{pl.__version__}"


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


def _selected(data: DataSource, loaded: LoadedSpec, plan: Plan) -> pl.LazyFrame:
    """The columns the spec reads, typed, under internal names; checked against the declared
    schema first. (A spec that reads no column keeps a row number, so its rows still count.)
    A unit column that is float is made NaN-free (NaN → null) here, so nulls are one test."""
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
        unit = pl.col(spec.privacy_unit)
        selected.append(
            (unit.fill_nan(None) if schema[spec.privacy_unit].is_float() else unit).alias(_UNIT)
        )
    if spec.period is not None:
        selected.append(_as_date(spec.period.column, schema[spec.period.column]).alias(_PERIOD))
    if not selected:
        selected.append(pl.int_range(pl.len(), dtype=pl.UInt64).alias(_ROW))
    return lf.select(selected)


def _in_period(month: Month | None) -> pl.Expr:
    if month is None:
        return pl.lit(True)
    period = pl.col(_PERIOD)
    return (period.dt.year() == month.year) & (period.dt.month() == month.month)


def _lazy_plan(
    selected: pl.LazyFrame, loaded: LoadedSpec, plan: Plan, month: Month | None, salt: int
) -> pl.LazyFrame:
    """The lazy aggregation over observed in-domain groups."""
    spec = loaded.spec
    keys = _keys(loaded)
    summed = list(dict.fromkeys(str(m.column) for m in _sums(plan)))
    lf = selected
    if spec.privacy_unit is not None:  # never one shared allowance for all unknown units
        lf = lf.filter(pl.col(_UNIT).is_not_null())
    if month is not None:
        lf = lf.filter(_in_period(month))
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


def _summary_plan(selected: pl.LazyFrame, loaded: LoadedSpec, month: Month | None) -> pl.LazyFrame:
    """One row of private facts for the operator and the ledger (see `InputSummary`), from the
    same typed rows as the aggregation, so `pl.collect_all` reads the input once for both.
    Every output name is internal, so no user column name can collide with one."""

    def in_period(expr: pl.Expr) -> pl.Expr:
        return expr if month is None else expr.filter(_in_period(month))

    names = selected.collect_schema().names()
    unit_rows = in_period(pl.col(_UNIT)).is_not_null().sum() if _UNIT in names else pl.lit(None)
    row_hash = pl.struct(pl.all()).hash(seed=FINGERPRINT_SEED).cast(pl.Int128)
    return selected.select(
        pl.len().alias(":input_rows"),
        (pl.len() if month is None else _in_period(month).sum()).alias(":period_rows"),
        unit_rows.alias(":unit_rows"),
        in_period(row_hash).sum().alias(":hash_sum"),
        *(in_period(pl.col(key)).is_not_null().sum().alias(key) for key in _keys(loaded).values()),
    )


def _summary(row: dict[str, int], loaded: LoadedSpec) -> InputSummary:
    return InputSummary(
        rows=row[":input_rows"],
        period_rows=row[":period_rows"],
        unit_rows=row[":unit_rows"],
        keyed_rows={column: row[key] for column, key in _keys(loaded).items()},
        fingerprint=fingerprint(FINGERPRINT_SCHEME, row[":period_rows"], row[":hash_sum"] or 0),
    )


class PolarsEngine:
    """The single-machine engine (streaming polars)."""

    name = "polars"

    def check(self, data: DataSource, loaded: LoadedSpec, plan: Plan, month: Month | None) -> None:
        """Validate the declared schema and let polars type the whole plan; reads no rows."""
        with withholding_engine_errors("planning the aggregation"):
            selected = _selected(data, loaded, plan)
            _lazy_plan(selected, loaded, plan, month, salt=0).collect_schema()
            _summary_plan(selected, loaded, month).collect_schema()

    def aggregate(
        self, data: DataSource, loaded: LoadedSpec, plan: Plan, month: Month | None, salt: int
    ) -> ExactAggregates:
        """Run the plan (streaming) and lay it on the full public key grid, missing groups = 0.

        The input summary shares the aggregation's scan (one read for both)."""
        with withholding_engine_errors(f"aggregating the input of release {loaded.spec.name!r}"):
            selected = _selected(data, loaded, plan)
            observed, summary = pl.collect_all(
                [
                    _lazy_plan(selected, loaded, plan, month, salt),
                    _summary_plan(selected, loaded, month),
                ],
                engine="streaming",
            )
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
        return ExactAggregates(grid, values, _summary(summary.row(0, named=True), loaded))

    def summarize(
        self, data: DataSource, loaded: LoadedSpec, plan: Plan, month: Month | None
    ) -> InputSummary:
        """The input summary alone (one pass): for a re-run that returns a stored release."""
        with withholding_engine_errors(f"reading the input of release {loaded.spec.name!r}"):
            selected = _selected(data, loaded, plan)
            row = _summary_plan(selected, loaded, month).collect(engine="streaming")
        return _summary(row.row(0, named=True), loaded)
