"""The polars engine's translation of the row plan (`_plan.RowPlan`) into polars expressions:
its internal column names, each row's keys, integer units and grid points, the typed selection of
the plan's columns, the row-local steps (unit, period, public domains) and the bounding of each
unit's contributions. `polars.py` runs these over an input, whole or in partitions; this module
only says what each step is, so both read the same definitions.

Internal column names start with ':'; the user's column names appear only in the first select,
so no input column can collide with them.
"""

from __future__ import annotations

import polars as pl

from dprelease.mechanism.engines._inputs import (
    Declared,
)
from dprelease.mechanism.engines._plan import (
    OLH_PRIME,
    OLH_REPORT,
    GridPoint,
    InCategories,
    Number,
    Reported,
    RowPlan,
    Units,
)
from dprelease.mechanism.engines._schema import validate_schema
from dprelease.period import Period

_UNIT = ":unit"
_PERIOD = ":period"
_ORDER = ":order"
_ROWS = ":rows"
_ROW = ":row"
#: The fingerprint's hash seed is fixed (not the per-release salt): fingerprints of the same
#: rows must agree across runs. Polars' hash may change between versions, hence the scheme.
FINGERPRINT_SEED = 0x6470_7265_6C65_6173
FINGERPRINT_SCHEME = f"polars-{pl.__version__}"


def _keys(plan: RowPlan) -> dict[str, str]:
    """Internal name of each key column."""
    return {column: f":key{i}" for i, column in enumerate(plan.key_columns)}


def _value(index: int) -> str:
    return f":value{index}"


def _units(index: int) -> str:
    return f":units{index}"


def _category(index: int) -> str:
    return f":category{index}"


def _point(index: int) -> str:
    return f":point{index}"


def _mass(index: int) -> str:
    return f":mass{index}"


def _encoded_dtypes(plan: RowPlan) -> pl.Schema:
    """The type each key is held in once it is known to be in its domain: text keys as an Enum
    of the domain's values (one small integer per row instead of a string, to hash, write to a
    partition and group by), other keys as their domain's."""
    dtypes = pl.Schema()
    for domain in plan.resolved.domains:
        for column, dtype in domain.schema.items():
            keys = domain.get_column(column).unique(maintain_order=True)
            dtypes[column] = pl.Enum(keys) if dtype == pl.String else dtype
    return dtypes


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


def _number(number: Number) -> pl.Expr:
    """A value column as a number: null, NaN or text that does not parse → the plan's fill (the
    nulls rule; without one, null: the row has no value), then clamped (±inf too)."""
    value = pl.col(_value(number.read)).cast(pl.Float64, strict=False).fill_nan(None)
    if number.fill is not None:
        value = value.fill_null(number.fill)
    return value.clip(number.lower, number.upper)


def _in_categories(term: InCategories, plan: RowPlan) -> pl.Expr:
    """1.0 where the column holds one of the categories (as numbers or as text), else 0.0."""
    column = pl.col(_category(plan.categories.index(term.column)))
    typed = column.cast(pl.Float64 if term.numeric else pl.String, strict=False)
    return typed.is_in(list(term.categories)).fill_null(False).cast(pl.Float64)


def _is(answer: object, report: pl.Expr) -> pl.Expr:
    """A k-RR report equals `answer`, compared as the domain's type: text as text, integers as
    numbers (text parsed: "1" and 1.0 are 1), booleans as their text (true, True)."""
    if isinstance(answer, bool):
        return report.cast(pl.String).str.to_lowercase().eq("true" if answer else "false")
    if isinstance(answer, int):
        return report.cast(pl.Float64, strict=False).eq(float(answer))
    return report.cast(pl.String).eq(answer)


def _olh_parts(report: pl.Expr) -> tuple[pl.Expr, pl.Expr, pl.Expr]:
    parts = report.cast(pl.String).str.extract_groups(OLH_REPORT)
    a, b, y = (parts.struct.field(str(i)).cast(pl.Int64, strict=False) for i in (1, 2, 3))
    return a, b, y


def _supports(term: Reported, report: pl.Expr, answer: int) -> pl.Expr:
    """Whether a report supports answer number `answer` (`Reported`)."""
    randomizer = term.randomizer
    if randomizer.mechanism == "krr":
        return _is(randomizer.domain[answer], report)
    if randomizer.mechanism == "oue":
        return report.cast(pl.String).str.slice(answer, 1) == "1"
    assert randomizer.g is not None
    a, b, y = _olh_parts(report)
    return ((a * answer + b) % OLH_PRIME) % randomizer.g == y


def _well_formed(term: Reported, report: pl.Expr) -> pl.Expr:
    """Whether a report is one the randomizer can give."""
    randomizer = term.randomizer
    if randomizer.mechanism == "krr":
        return pl.any_horizontal(_supports(term, report, j) for j in range(randomizer.k))
    text = report.cast(pl.String)
    if randomizer.mechanism == "oue":
        return text.str.contains(f"^[01]{{{randomizer.k}}}$")
    assert randomizer.g is not None
    a, b, y = _olh_parts(report)
    return (
        text.str.contains(OLH_REPORT)
        & a.is_between(1, OLH_PRIME - 1)
        & b.is_between(0, OLH_PRIME - 1)
        & y.is_between(0, randomizer.g - 1)
    )


def _reported(term: Reported, plan: RowPlan) -> pl.Expr:
    """1.0 where the row's report passes the term's test (`Reported`), else 0.0."""
    report = pl.col(_category(plan.categories.index(term.column)))
    present = report.is_not_null()
    if term.test == "answered":
        passed = present
    elif term.test == "stale":
        sealed = pl.col(_category(plan.categories.index(term.hash_column))).cast(pl.String)
        passed = present & (sealed != term.expected).fill_null(True)
    elif term.test == "supports":
        passed = present & _well_formed(term, report) & _supports(term, report, term.answer)
    else:
        passed = present & ~_well_formed(term, report).fill_null(False)
    return passed.fill_null(False).cast(pl.Float64)


def _factor(factor: Number | InCategories | Reported, plan: RowPlan) -> pl.Expr:
    if isinstance(factor, Number):
        return _number(factor)
    if isinstance(factor, InCategories):
        return _in_categories(factor, plan)
    return _reported(factor, plan)


def _units_of(units: Units, plan: RowPlan) -> pl.Expr:
    """What a row adds to a sum in integer units: the product of its factors, rounded half to
    even to units of the granularity, then clamped to the range in units."""
    factors = [_factor(f, plan) for f in units.factors]
    product = factors[0] if len(factors) == 1 else factors[0] * factors[1]
    product = product.fill_null(0.0)  # a dropped factor without a value: the row adds 0
    rounded = (product / units.granularity).round()
    # clamped while still a float (the unit bounds are at most 2^53, so exact as floats: Δ is
    # at least the largest bound and a Δ above 2^53 is refused), then cast once: the cast
    # cannot fail, as every value is a whole number within the bounds
    rounded = rounded.clip(float(units.lower_units), float(units.upper_units))
    return rounded.cast(_narrowest_int(units.lower_units, units.upper_units), strict=False)


def _point_of(point: GridPoint) -> pl.Expr:
    """The value's grid point: (x − lower)/resolution rounded half to even, as an index (null
    where a dropped number has no value: `_histograms` skips it)."""
    steps = ((_number(point.number) - point.lower) / point.resolution).round()
    points = steps.cast(pl.Int64, strict=False).clip(0, point.bins - 1)
    return points.cast(_narrowest_int(0, point.bins - 1))


def _narrowest_int(low: int, high: int) -> pl.DataType:
    """The smallest signed integer type holding low..high (from the spec): a partition holds
    fewer bytes per row."""
    for dtype, bits in ((pl.Int8(), 8), (pl.Int16(), 16), (pl.Int32(), 32)):
        if -(2 ** (bits - 1)) <= low and high < 2 ** (bits - 1):
            return dtype
    return pl.Int64()


def _selected(lf: pl.LazyFrame, declaration: Declared, plan: RowPlan) -> pl.LazyFrame:
    """The columns the plan reads, typed, under internal names; checked against the declared
    schema first. (A spec that reads no column keeps a row number, so its rows still count.)
    A unit column that is float is made NaN-free (NaN → null) here, so nulls are one test."""
    schema = lf.collect_schema()
    validate_schema(schema, plan, declaration)
    keys = _keys(plan)
    key_dtype = plan.resolved.key_dtype
    selected = [
        *(_as_key(c, schema[c], key_dtype(c)).alias(keys[c]) for c in plan.key_columns),
        *(pl.col(c).alias(_value(i)) for i, c in enumerate(plan.reads)),
        *(pl.col(c).alias(_category(i)) for i, c in enumerate(plan.categories)),
    ]
    if plan.unit is not None:
        unit = pl.col(plan.unit)
        selected.append(
            (unit.fill_nan(None) if schema[plan.unit].is_float() else unit).alias(_UNIT)
        )
    if plan.period_column is not None:
        period = plan.period_column
        selected.append(_as_date(period, schema[period]).alias(_PERIOD))
    if not selected:
        selected.append(pl.int_range(pl.len(), dtype=pl.UInt64).alias(_ROW))
    return lf.select(selected)


def _in_period(month: Period | None) -> pl.Expr:
    if month is None:
        return pl.lit(True)
    period = pl.col(_PERIOD)
    return (period.dt.year() == month.year) & (period.dt.month() == month.month)


def _row_local(selected: pl.LazyFrame, plan: RowPlan) -> pl.LazyFrame:
    """Every step before the bounding, row by row (so it streams): the in-domain rows of the
    period with a unit, keys encoded (`_encoded_dtypes`), the integer units of each sum and
    each grid point and, with a unit, only the keys, the unit and those: all the bounding and
    the aggregation read, and all a partition holds."""
    keys = _keys(plan)
    lf = _in_domains(_with_unit_in_period(selected, plan), plan)
    sums = [_units_of(units, plan).alias(_units(i)) for i, units in enumerate(plan.sums)] + [
        _point_of(point).alias(_point(i)) for i, point in enumerate(plan.histograms)
    ]
    sums += [
        _units_of(point.mass, plan).alias(_mass(i))
        for i, point in enumerate(plan.histograms)
        if point.mass is not None
    ]
    if plan.unit is None:
        return lf.with_columns(sums)
    return lf.select(*keys.values(), _UNIT, *sums)


def _with_unit_in_period(lf: pl.LazyFrame, plan: RowPlan) -> pl.LazyFrame:
    """The rows with a unit (never one shared allowance for all unknown units) in the period."""
    if plan.unit is not None:
        lf = lf.filter(pl.col(_UNIT).is_not_null())
    if plan.period is not None:
        lf = lf.filter(_in_period(plan.period))
    return lf


def _in_domains(lf: pl.LazyFrame, plan: RowPlan, skip: int | None = None) -> pl.LazyFrame:
    """The rows whose keys lie in every public domain (but group-by entry `skip`'s), keys
    encoded (`_encoded_dtypes`); keys outside a domain (or null) are dropped."""
    keys = _keys(plan)
    dtypes = _encoded_dtypes(plan)
    for index, domain in enumerate(plan.resolved.domains):
        if index == skip:
            continue
        domain = domain.cast({column: dtypes[column] for column in domain.columns})
        names = {column: keys[column] for column in domain.columns}
        lf = lf.with_columns(  # text outside its Enum becomes null, so it is dropped too
            pl.col(names[column]).cast(dtype, strict=False)
            for column, dtype in domain.schema.items()
        )
        if domain.width == 1:
            (column,) = domain.columns
            key = pl.col(names[column])
            if isinstance(dtypes[column], pl.Enum):  # its values are the domain: the rest is null
                lf = lf.filter(key.is_not_null())
            else:
                lf = lf.filter(key.is_in(domain.get_column(column).implode()))
        else:
            lf = lf.join(domain.rename(names).lazy(), on=list(names.values()), how="semi")
    return lf


def _bounded(lf: pl.LazyFrame, plan: RowPlan, salt: int) -> pl.LazyFrame:
    """Per unit, keep a random choice of rows: ≤ G groups (smallest salted hash of the unit and
    keys), ≤ R_g rows per group and ≤ R rows (smallest salted order). Needs all of a unit's rows
    at once, and only them."""
    bounding = plan.bounding
    if bounding is None:
        return lf
    keys = list(_keys(plan).values())
    # a row's order is a salted hash of all it contributes (its unit, keys and integer units), so
    # a unit's order depends on its own rows only, and rows that tie contribute alike
    lf = lf.with_columns(pl.struct(pl.all()).hash(seed=salt).alias(_ORDER))
    if bounding.groups is not None:
        group_order = pl.struct(_UNIT, *keys).hash(seed=salt).rank("dense").over(_UNIT)
        lf = lf.filter(group_order <= bounding.groups)
    if bounding.rows_per_group is not None:
        in_group = pl.col(_ORDER).rank("ordinal").over(_UNIT, *keys)
        lf = lf.filter(in_group <= bounding.rows_per_group)
    return lf.filter(pl.col(_ORDER).rank("ordinal").over(_UNIT) <= bounding.rows)


def _aggregated(lf: pl.LazyFrame, plan: RowPlan) -> pl.LazyFrame:
    """Rows and Int128 sums of units per observed in-domain group."""
    aggregations = [
        pl.len().cast(pl.Int128).alias(_ROWS),
        *(pl.col(_units(i)).cast(pl.Int128).sum() for i in range(len(plan.sums))),
    ]
    keys = list(_keys(plan).values())
    return lf.group_by(keys).agg(aggregations) if keys else lf.select(aggregations)


def _histograms(lf: pl.LazyFrame, plan: RowPlan) -> list[pl.LazyFrame]:
    """Per histogram, the rows of each observed (group, grid point); a weighted one's sum of
    weight units there instead."""
    keys = list(_keys(plan).values())
    return [
        lf.filter(pl.col(_point(i)).is_not_null())
        .group_by([*keys, _point(i)])
        .agg((pl.len() if point.mass is None else _mass_sum(i)).cast(pl.Int64).alias(_ROWS))
        for i, point in enumerate(plan.histograms)
    ]


def _mass_sum(index: int) -> pl.Expr:
    """A weighted histogram's steps summed in Int64 (a row's are held as narrow as the spec
    allows, and polars would sum an Int32 column in Int32: 2^31 steps is only 21,000 rows of
    weight W at 2^17 steps)."""
    return pl.col(_mass(index)).cast(pl.Int64).sum()


def _kept(bounded: pl.LazyFrame, plan: RowPlan) -> pl.LazyFrame:
    """The rows a partition keeps, collected once when several aggregations read them (the
    counts and sums, and each histogram): bounding holds a partition's rows in memory anyway,
    and polars would otherwise bound it again for every aggregation."""
    if not plan.histograms:
        return bounded
    return bounded.collect(engine="streaming").lazy()


def _histogram_sum(parts: list[pl.DataFrame], plan: RowPlan, index: int) -> pl.DataFrame:
    """Partitions' histograms of one statistic added up."""
    keys = [*_keys(plan).values(), _point(index)]
    return pl.concat(parts).group_by(keys).agg(pl.col(_ROWS).sum())
