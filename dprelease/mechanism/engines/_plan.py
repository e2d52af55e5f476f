"""The row plan: every step from confidential input rows to exact integer aggregates, decided
once from public facts, for every engine to translate.

    read the columns the spec reads, typed as each role needs (`needs`: keys as their domain's
      keys, values as numbers, the period as dates; text parsed, the rest null)
    → drop rows whose privacy unit is null → keep the period's rows
    → drop keys outside the public domain (or null); number the cell of the key grid
    → per row, what it adds to each sum (`Units`: each factor read as a number by the nulls
      rule, clamped, their product in integer units of a granularity, clamped to the units'
      range; 0 where a dropped factor has no value) and each histogram's grid point
      (`GridPoint`; none where its dropped number has no value)
    → bound each unit's contributions (`Bounding`: ≤ G groups, ≤ R_g rows per group, ≤ R rows,
      chosen by a salted hash of what each row holds)
    → aggregate exactly per cell: the rows, each sum (Int128), each histogram (cell, grid point:
      its rows, or the sum of a weighted histogram's integer weight units)

An engine implements how (polars' lazy frames, Spark's DataFrames), never what: every number
above (the nulls rule's fill, the bounds, granularities, unit ranges, grid origin and step,
the contribution bounds) is the plan's. Aggregates are named, so an aggregate two statistics
read is computed once, and the aggregates of disjoint inputs add up (a site's plus another's
is the pooled one's).

The vocabulary of aggregate shapes is what statistic kinds ask for: rows per cell (always), a
sum of `Units` per cell (each factor a `Number`, `InCategories`: 1 where a column holds one of
public categories, or `Reported`: 1 where a randomized report says so), a histogram of
`GridPoint`s per cell, and for key selection the distinct
units per key of a selected group-by, each unit bounded to G keys (`DistinctUnits`). A new shape
is a new term here and its translation in each engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol

import polars as pl

from dprelease.mechanism.randomized import PRIME, Randomizer
from dprelease.period import Period
from dprelease.spec import ResolvedSpec, SelectDomain

#: The row plan's vocabulary: what the engines' face exports, a new term with it.
__all__ = [
    "Bounding",
    "CategoryNeed",
    "DateNeed",
    "DistinctUnits",
    "GridPoint",
    "InCategories",
    "KeyNeed",
    "Need",
    "OLH_PRIME",
    "OLH_REPORT",
    "Number",
    "NumberNeed",
    "ReportNeed",
    "Reported",
    "RowPlan",
    "Units",
    "key_dtype_fits",
    "nulls_rule",
]


def nulls_rule(lower: float, upper: float) -> float:
    """What a null or NaN value (or text that does not parse as a number) counts as: 0 when 0
    lies in [lower, upper], else lower (PRIVACY.md, the nulls rule)."""
    return 0.0 if lower <= 0.0 <= upper else lower


@dataclass(frozen=True)
class Number:
    """A value column read as a number: null, NaN or unparseable → `fill`, then clamped to
    [lower, upper] (±inf too). `read` is the column's position in `RowPlan.reads`.

    `fill` None (`missing: drop`): such a row has no value; it adds 0 to every sum this factor
    is in (a value, or the 1 of a count of rows with a value) and no point to a histogram."""

    read: int
    lower: float
    upper: float
    fill: float | None

    @classmethod
    def clamped(cls, read: int, lower: float, upper: float, *, drop: bool = False) -> Number:
        """The column clamped to [lower, upper], nulls by the nulls rule (or dropped)."""
        return cls(read, lower, upper, None if drop else nulls_rule(lower, upper))


@dataclass(frozen=True)
class InCategories:
    """1 where a column holds one of the public `categories`, else 0 (a null, a value that does
    not convert and any other value too). Text categories compare the column as text, number
    categories as numbers (text parsed: "1", 1 and 1.0 are the number 1). The column is read as
    it is (`RowPlan.categories`), apart from the value columns read as numbers."""

    column: str
    categories: tuple[str | float, ...]

    @property
    def numeric(self) -> bool:
        return any(isinstance(category, float) for category in self.categories)


#: An OLH report: "a:b:y", the hash's seeds and the bucket (`Reported`); the modulus of its hash.
OLH_REPORT = r"^(\d{1,10}):(\d{1,10}):(\d{1,10})$"
OLH_PRIME = PRIME

#: What a `Reported` factor tests of a row's randomized report.
ReportTest = Literal["answered", "supports", "malformed", "stale"]


@dataclass(frozen=True)
class Reported:
    """Local DP: 1 where a row's randomized report (in `column`, made by `randomizer` on the
    respondent's device) passes `test`, else 0. A null report is no answer: 0 for every test.

    * "answered": there is a report;
    * "supports": the report is well formed and supports answer number `answer` (k-RR: the
      report is that answer, compared as the domain's type; OUE: its character `answer` is 1;
      OLH: the hash with the report's seeds maps `answer` to its bucket);
    * "malformed": the report is not one this randomizer can give (an answer outside the
      domain, a bit string of another length, OLH seeds or a bucket out of range);
    * "stale": the report's `hash_column` is missing or not `expected`, the wave's hash.

    The columns are read as they are (`RowPlan.categories`), as `InCategories`' are."""

    column: str
    randomizer: Randomizer
    test: ReportTest
    answer: int = 0
    hash_column: str = ""
    expected: str = ""

    @property
    def columns(self) -> tuple[str, ...]:
        return (self.column, self.hash_column) if self.test == "stale" else (self.column,)


@dataclass(frozen=True)
class Units:
    """What each kept row adds to the sum named `name`: the product of its `factors` (a value,
    a survey weight) divided by `granularity` and rounded half to even, clamped to
    [lower_units, upper_units] (at most 2^53 in size, so exact in a float64 and Δ holds in the
    integers noised whatever the rounding did)."""

    name: str
    factors: tuple[Number | InCategories | Reported, ...]
    granularity: float
    lower_units: int
    upper_units: int


@dataclass(frozen=True)
class GridPoint:
    """Each kept row's point on a public grid, for the histogram named `name`: its value (a
    `Number`) minus `lower`, divided by `resolution` in float64, rounded half to even, clamped to
    the indices 0 … bins − 1 (`QuantileGrid.discretize`). The histogram counts rows, or with a
    `mass` (a survey-weighted quantile) sums each row's integer units of it: its weight read
    by the nulls rule, clamped to [0, W], in units of a public step (`Units`)."""

    name: str
    number: Number
    lower: float
    resolution: float
    bins: int
    mass: Units | None = None


@dataclass(frozen=True)
class Bounding:
    """Per unit, a random choice of ≤ `groups` groups (G), ≤ `rows_per_group` rows in each
    (R_g) and ≤ `rows` rows (R); None where not declared."""

    rows: int
    groups: int | None
    rows_per_group: int | None


@dataclass(frozen=True)
class DistinctUnits:
    """For key selection: per candidate key of the group-by entry `group` (its `columns`), the
    distinct units holding it, split by how many candidate keys their unit kept (g = 1..G), each
    unit keeping ≤ G = `max_keys_per_unit` of its keys, those of smallest salted hash of (unit,
    key), ties by key value (a choice from the unit's own keys only). Read from the rows that
    have a unit and lie in the period and in the public domains of the *other* group-by
    columns; the entry's `always` keys (its resolved domain) and null keys are no candidates.
    Candidates come back sorted by key (`mechanism.selection.units_per_key`)."""

    group: int
    columns: tuple[str, ...]
    max_keys_per_unit: int


class Need(Protocol):
    """What a role needs of a column's declared dtype (a typed input: a CSV's text columns are
    parsed for their role instead)."""

    def fits(self, dtype: pl.DataType, untyped: bool) -> bool: ...

    def refusal(self, dtype: pl.DataType) -> str: ...


def key_dtype_fits(data: pl.DataType, domain: pl.DataType) -> bool:
    """Whether a typed key column can be typed as its domain's keys: the same dtype, text keys
    from categoricals, integer or float keys from any number (1.0 is the integer key 1)."""
    if data in (domain, pl.Null):
        return True
    if domain == pl.String:
        return data == pl.Categorical or isinstance(data, pl.Enum)
    return (domain.is_integer() or domain.is_float()) and data.is_numeric()


def _parses_as_key(domain: pl.DataType) -> bool:
    """Domains whose keys can be parsed from text."""
    return domain in (pl.String, pl.Boolean) or domain.is_integer() or domain.is_float()


@dataclass(frozen=True)
class KeyNeed:
    """A column typed as the keys of a public domain (`selected`: of keys selected from the
    data, read as text unless the `always` keys say otherwise, so any column fits text)."""

    domain: pl.DataType
    selected: bool = False

    def fits(self, dtype: pl.DataType, untyped: bool) -> bool:
        if self.selected and self.domain == pl.String:
            return True
        return _parses_as_key(self.domain) if untyped else key_dtype_fits(dtype, self.domain)

    def refusal(self, dtype: pl.DataType) -> str:
        return (
            f"has dtype {dtype} but its public key domain holds {self.domain} keys; "
            "fix the domain or the column"
        )


@dataclass(frozen=True)
class NumberNeed:
    """A column read as numbers; `why` names who reads it. A boolean column is read as 0/1
    (False/True), as both engines cast it: a sum of a flag is how many rows have it set."""

    why: str

    def fits(self, dtype: pl.DataType, untyped: bool) -> bool:
        return untyped or dtype.is_numeric() or dtype in (pl.Boolean, pl.Null)

    def refusal(self, dtype: pl.DataType) -> str:
        return f"has dtype {dtype} but {self.why}"


@dataclass(frozen=True)
class DateNeed:
    """The period column: dates or timestamps."""

    def fits(self, dtype: pl.DataType, untyped: bool) -> bool:
        return untyped or dtype in (pl.Date, pl.Null) or isinstance(dtype, pl.Datetime)

    def refusal(self, dtype: pl.DataType) -> str:
        return f"has dtype {dtype}; a period column needs Date or Datetime"


@dataclass(frozen=True)
class CategoryNeed:
    """A column compared with public categories: text with text (or categorical) values,
    numbers with numbers; `why` names who compares it."""

    numeric: bool
    why: str

    def fits(self, dtype: pl.DataType, untyped: bool) -> bool:
        if untyped or dtype == pl.Null:
            return True
        if self.numeric:
            return dtype.is_numeric()
        return dtype in (pl.String, pl.Categorical) or isinstance(dtype, pl.Enum)

    def refusal(self, dtype: pl.DataType) -> str:
        kind = "numbers" if self.numeric else "text categories"
        return f"has dtype {dtype} but {self.why} compares it with {kind}"


@dataclass(frozen=True)
class ReportNeed:
    """A column of randomized reports: k-RR's are answers of the domain (text, integers or
    booleans, as the domain), OUE's and OLH's text; `hashes`: the column of each report's
    wave_hash (text)."""

    randomizer: Randomizer | None  # None: the hash column
    why: str

    def fits(self, dtype: pl.DataType, untyped: bool) -> bool:
        if untyped or dtype == pl.Null:
            return True
        text = dtype in (pl.String, pl.Categorical) or isinstance(dtype, pl.Enum)
        if self.randomizer is None or self.randomizer.mechanism != "krr":
            return dtype == pl.String
        wanted = pl.Series(list(self.randomizer.domain)).dtype
        if wanted == pl.String:
            return text
        if wanted == pl.Boolean:
            return dtype == pl.Boolean or text
        return dtype.is_numeric()  # integer answers: a float column (pandas' with nulls) too

    def refusal(self, dtype: pl.DataType) -> str:
        if self.randomizer is None:
            return f"has dtype {dtype} but holds {self.why} (text)"
        if self.randomizer.mechanism == "krr":
            wanted = pl.Series(list(self.randomizer.domain)).dtype
            return f"has dtype {dtype} but holds {self.why}: answers of the domain ({wanted})"
        return f"has dtype {dtype} but holds {self.why}: {self.randomizer.mechanism} reports (text)"


@dataclass(frozen=True)
class RowPlan:
    """Everything an engine does to one input (see the module): decided from the resolved spec,
    the period and the statistics' aggregate requests, never from the data."""

    resolved: ResolvedSpec  # the key domains and grid: the rows of the released table
    period: Period | None  # the rows that count (None: every row)
    reads: tuple[str, ...]  # the value columns read, in order (`Number.read` indexes them)
    vectors: tuple[str, ...]  # every per-cell aggregate's name: a sum's, else a count of rows
    sums: tuple[Units, ...]
    histograms: tuple[GridPoint, ...]
    paths: dict[str, str] = field(default_factory=dict)  # every column read → its YAML path
    needs: tuple[tuple[str, Need], ...] = ()  # what each role needs of a column's dtype
    categories: tuple[str, ...] = ()  # the columns `InCategories` read as they are, in order
    selections: tuple[DistinctUnits, ...] = ()  # key selection's aggregates, one per entry

    def column_of(self, vector: str) -> int | None:
        """The position in `sums` of the sum named `vector` (None: it counts rows)."""
        return next((i for i, units in enumerate(self.sums) if units.name == vector), None)

    @property
    def name(self) -> str:
        """The release's name, for an engine's messages."""
        return self.resolved.spec.name

    @property
    def key_columns(self) -> list[str]:
        return self.resolved.spec.key_columns

    @property
    def unit(self) -> str | None:
        """The privacy unit column (None: each row is a unit, and nothing is bounded)."""
        return self.resolved.spec.privacy_unit

    @property
    def period_column(self) -> str | None:
        period = self.resolved.spec.period
        return None if period is None else period.column

    @property
    def bounding(self) -> Bounding | None:
        """The contribution bounds (None without a privacy unit)."""
        bounds = self.resolved.spec.unit_bounds
        if not bounds.unit:
            return None
        return Bounding(bounds.rows, bounds.groups, bounds.rows_per_group)

    @classmethod
    def of(
        cls,
        resolved: ResolvedSpec,
        period: Period | None,
        reads: list[str],
        vectors: list[str],
        sums: list[Units],
        histograms: list[GridPoint],
    ) -> RowPlan:
        """The plan of these aggregates, with every column the spec reads, its YAML path (where
        the user wrote it: `ResolvedSpec.yaml_path`) and what its role needs of its dtype (keys,
        statistics' values, survey weights, period)."""
        spec = resolved.spec
        paths: dict[str, str] = {}
        if spec.privacy_unit is not None:
            paths[spec.privacy_unit] = "release.privacy_unit"
        for i, group in enumerate(spec.group_by):
            for column in group.key_columns:
                paths[column] = f"release.group_by[{i}].{'column' if group.column else 'columns'}"
        for i, stat in enumerate(spec.statistics):
            for column, named_by in stat.read_fields().items():
                paths.setdefault(column, f"release.statistics[{i}].{named_by}")
            for column in stat.category_reads():
                paths.setdefault(column, f"release.statistics[{i}].column")
        weights = _weights_read(resolved)
        for column, path in weights.items():
            paths.setdefault(column, path)
        if spec.period is not None:
            paths[spec.period.column] = "release.period.column"
        chosen = {c for i in resolved.selected for c in spec.group_by[i].key_columns}
        needs: list[tuple[str, Need]] = [
            (column, KeyNeed(resolved.key_dtype(column), column in chosen))
            for column in spec.key_columns
        ]
        numeric: dict[str, str] = {}  # column → who needs numbers in it (the first to read it)
        for stat in spec.statistics:
            for column in stat.reads():
                numeric.setdefault(column, f"statistic {stat.name!r} needs a numeric column")
        for column in weights:
            numeric.setdefault(column, "a survey weight needs a numeric column")
        needs += [(column, NumberNeed(why)) for column, why in numeric.items()]
        for stat in spec.statistics:
            for column, values in stat.category_reads().items():
                numbers = any(isinstance(v, float) for v in values)
                needs.append((column, CategoryNeed(numbers, f"statistic {stat.name!r}")))
        compared = [f.column for u in sums for f in u.factors if isinstance(f, InCategories)]
        reported = [f for u in sums for f in u.factors if isinstance(f, Reported)]
        for term in reported:
            compared += term.columns
            if term.test == "answered":
                needs.append((term.column, ReportNeed(term.randomizer, "randomized reports")))
            if term.test == "stale":
                needs.append((term.hash_column, ReportNeed(None, "each report's wave_hash")))
        if spec.period is not None:
            needs.append((spec.period.column, DateNeed()))
        return cls(
            resolved,
            period,
            tuple(reads),
            tuple(vectors),
            tuple(sums),
            tuple(histograms),
            {column: resolved.yaml_path(path) for column, path in paths.items()},
            tuple(needs),
            tuple(dict.fromkeys(compared)),
            tuple(_distinct_units(resolved)),
        )


def _distinct_units(resolved: ResolvedSpec) -> list[DistinctUnits]:
    """Key selection's aggregate for every selected group-by entry."""
    terms = []
    for index in resolved.selected:
        group = resolved.spec.group_by[index]
        assert isinstance(group.domain, SelectDomain)
        terms.append(DistinctUnits(index, tuple(group.key_columns), group.domain.max_keys_per_unit))
    return terms


def _weights_read(resolved: ResolvedSpec) -> dict[str, str]:
    """Every survey weight column the spec reads, with the YAML path that declares it."""
    spec = resolved.spec
    paths: dict[str, str] = {}
    for i, stat in enumerate(spec.statistics):
        if stat.survey_weight is not None:
            paths.setdefault(stat.survey_weight.column, f"release.statistics[{i}].survey_weight")
        elif spec.survey_weight is not None:
            paths.setdefault(spec.survey_weight.column, "release.survey_weight")
    return {column: f"{path}.column" for column, path in paths.items()}
