"""A large input is bounded partition by partition; the result must not depend on that.

The polars engine splits its input by a salted hash of the privacy unit when it has more than
`rows_per_partition` rows, writes the partitions to private temporary files and adds the
aggregates of each. For a fixed salt every unit must keep exactly the rows it keeps when all
units are bounded at once, so the exact aggregates are identical; here the partitioning is
forced down to a handful of rows per partition. The private input summary (row counts and the
fingerprint) comes from the same pass and must not change either. The temporary files must be
gone afterwards, whether the aggregation succeeded or failed. What partitioning is for, a peak
memory that does not grow with the rows, is measured in bench/bench_engine.py (the engine and
engine_whole variants), not here: it takes millions of rows.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from helpers import prepare_release
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dprelease.errors import DataError
from dprelease.mechanism.engines import EngineJob, ExactAggregates
from dprelease.mechanism.engines import polars as engine_module
from dprelease.mechanism.engines.polars import PolarsEngine
from dprelease.period import Period
from dprelease.spec import ResolvedSpec, parse_spec

REGIONS = ["a", "b", "c"]
MONTH = Period(2024, 3)


def spec(grouped: bool = True, **bounds: int) -> dict[str, Any]:
    return {
        "name": "p",
        "source": "p",
        "privacy_unit": "pid",
        "period": {"column": "day"},
        "group_by": [
            {"column": "region", "domain": {"values": REGIONS}},
            {"column": "age", "domain": {"min": 0, "max": 2}},
        ]
        if grouped
        else [],
        "statistics": [
            {"name": "n", "kind": "count"},
            {"name": "v", "kind": "sum", "column": "v", "lower": -5, "upper": 5},
            {
                "name": "m",
                "kind": "median",
                "column": "v",
                "lower": -5,
                "upper": 5,
                "resolution": 0.5,
            },
        ],  # fmt: skip
        **bounds,
    }


ROWS = st.builds(lambda r: {"max_rows_per_unit": r}, st.integers(1, 4))
GROUPED_BOUNDS = st.one_of(
    ROWS,
    st.builds(
        lambda g, rg: {"max_groups_per_unit": g, "max_rows_per_group": rg},
        st.integers(1, 3),
        st.integers(1, 3),
    ),
    st.builds(
        lambda r, g, rg: {
            "max_rows_per_unit": min(r, g * rg),
            "max_groups_per_unit": g,
            "max_rows_per_group": rg,
        },
        st.integers(1, 4),
        st.integers(1, 3),
        st.integers(1, 3),
    ),
)
#: Unit ids as each dtype holds them; -0.0 and 0.0 are one unit, as are the text and
#: categorical spellings of one id.
UNITS: dict[str, tuple[pl.DataType, list[Any]]] = {
    "int": (pl.Int64(), [0, 1, 2, 3, 4, 5, 6, 7, None]),
    "float": (pl.Float64(), [0.0, -0.0, 1.5, 2.0, 3.0, math.nan, None]),
    "text": (pl.String(), ["p0", "p1", "p2", "p3", "p4", "p5", "", None]),
    "categorical": (pl.Categorical(), ["p0", "p1", "p2", "p3", "p4", None]),
}


def rows(units: list[Any]) -> st.SearchStrategy[list[dict[str, Any]]]:
    row = st.fixed_dictionaries(
        {
            "pid": st.sampled_from(units),
            "region": st.sampled_from([*REGIONS, "z", None]),
            "age": st.sampled_from([0, 1, 2, 3, None]),
            "v": st.one_of(st.none(), st.floats(-8, 8, allow_nan=False)),
            "day": st.sampled_from(["2024-03-01", "2024-03-31", "2024-04-01", None]),
        }
    )
    return st.lists(row, min_size=0, max_size=60)


def frame(data: list[dict[str, Any]], unit: pl.DataType) -> pl.DataFrame:
    schema = {
        "pid": unit,
        "region": pl.String(),
        "age": pl.Int64(),
        "v": pl.Float64(),
        "day": pl.String(),
    }
    return pl.DataFrame(data, schema=schema).with_columns(pl.col("day").str.to_date())


def aggregates(engine: PolarsEngine, data: object, loaded: ResolvedSpec, salt: int) -> dict:
    """The exact aggregates, and the private input summary computed in the same pass."""
    plan = prepare_release(data, loaded, 1.0, period="2024-03").allocation
    job = EngineJob(data, loaded, plan, MONTH)
    result: ExactAggregates = engine.aggregate(job, salt)
    for series in result.values.values():
        assert series.dtype == pl.Int128
    summary = dataclasses.asdict(result.summary)
    assert summary == dataclasses.asdict(engine.summarize(job))
    histograms = {  # a quantile's rows per (cell, grid point), in a fixed order
        name: sorted(h.iter_rows()) for name, h in result.histograms.items()
    }
    assert histograms.keys() == {"m"}
    values = {name: s.to_list() for name, s in result.values.items()}
    return {"summary": summary, **values, "histograms": histograms}


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The system temporary directory, redirected so the test can see what is left in it."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


@dataclass
class Split:
    """What the engine split: the number of partitions of each partitioned aggregation, and
    each partition it then bounded on its own (it scans them with `pl.scan_ipc`)."""

    partitions: list[int] = field(default_factory=list)
    read: list[str] = field(default_factory=list)


@pytest.fixture
def split(monkeypatch: pytest.MonkeyPatch) -> Split:
    seen = Split()
    partitioned, scan_ipc = engine_module._partitioned, pl.scan_ipc

    def partitioned_spy(*args: Any) -> tuple[pl.DataFrame, pl.DataFrame, list[pl.DataFrame]]:
        row_local, summary, loaded, plan, partitions, salt = args
        seen.partitions.append(partitions)
        return partitioned(*args)

    def scan_ipc_spy(source: Any, **kwargs: Any) -> pl.LazyFrame:
        seen.read.append(str(source))
        return scan_ipc(source, **kwargs)

    monkeypatch.setattr(engine_module, "_partitioned", partitioned_spy)
    monkeypatch.setattr(engine_module.pl, "scan_ipc", scan_ipc_spy)
    return seen


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    grouped_bounds=st.one_of(
        st.tuples(st.just(True), GROUPED_BOUNDS), st.tuples(st.just(False), ROWS)
    ),
    unit=st.sampled_from(sorted(UNITS)),
    data=st.data(),
    per_partition=st.integers(1, 8),
    salt=st.integers(0, 2**64 - 1),
)
def test_partitioned_aggregates_equal_the_unpartitioned_ones(
    private_tmp: Path,
    split: Split,
    grouped_bounds: tuple[bool, dict[str, int]],
    unit: str,
    data: st.DataObject,
    per_partition: int,
    salt: int,
) -> None:
    split.partitions.clear()  # the fixture lives across examples
    dtype, units = UNITS[unit]
    table = frame(data.draw(rows(units)), dtype)
    grouped, bounds = grouped_bounds
    loaded = parse_spec(spec(grouped, **bounds))
    whole = aggregates(PolarsEngine(rows_per_partition=table.height + 1), table, loaded, salt)
    assert not split.partitions
    assert aggregates(PolarsEngine(rows_per_partition=per_partition), table, loaded, salt) == whole
    assert split.partitions == (
        [-(-table.height // per_partition)] if table.height > per_partition else []
    )
    assert not any(private_tmp.iterdir())


def test_partitioned_input_files_give_the_unpartitioned_aggregates(
    tmp_path: Path, private_tmp: Path, split: Split
) -> None:
    """Parquet and CSV (read as text) inputs, 2,000 rows of 300 units in 40 partitions."""
    n = 2_000
    table = pl.DataFrame(
        {
            "pid": [(i * 7919) % 300 for i in range(n)],
            "region": [REGIONS[i % 4] if i % 4 < 3 else "z" for i in range(n)],
            "age": [i % 4 for i in range(n)],
            "v": [((i * 37) % 23) / 2 - 5.5 for i in range(n)],
            "day": ["2024-03-0" + str(1 + i % 9) if i % 5 else "2024-04-02" for i in range(n)],
        }
    ).with_columns(pl.col("day").str.to_date())
    files = {"parquet": tmp_path / "in.parquet", "csv": tmp_path / "in.csv"}
    table.write_parquet(files["parquet"])
    table.write_csv(files["csv"])
    loaded = parse_spec(spec(max_rows_per_unit=3, max_groups_per_unit=2, max_rows_per_group=2))
    for path in files.values():
        whole = aggregates(PolarsEngine(), path, loaded, salt=12345)
        assert not split.read
        assert aggregates(PolarsEngine(rows_per_partition=50), path, loaded, salt=12345) == whole
        assert len(split.read) > 30  # of 40 (some may hold no unit of the period)
        split.read.clear()
    assert set(private_tmp.iterdir()) == set(files.values())


@pytest.mark.parametrize(
    "unit",
    [
        pl.Series([None] * 40, dtype=pl.Null),
        pl.Series([i % 7 for i in range(40)], dtype=pl.Int128),
        pl.Series([2**64 - 1 - i % 7 for i in range(40)], dtype=pl.UInt64),
        pl.Series([decimal.Decimal(i % 7) / 4 for i in range(40)], dtype=pl.Decimal(10, 2)),
        pl.Series([dt.time(i % 7) for i in range(40)]),
        pl.Series([dt.timedelta(i % 7) for i in range(40)]),
        pl.Series([bytes([i % 7]) for i in range(40)]),
        pl.Series([i % 2 == 0 for i in range(40)]),
        pl.Series([dt.datetime(2020, 1, 1, i % 7) for i in range(40)]).dt.replace_time_zone(
            "Europe/Paris"
        ),
        pl.Series([str(i % 7) for i in range(40)], dtype=pl.Enum([str(i) for i in range(7)])),
        pl.Series([i % 7 - 3.0 for i in range(40)], dtype=pl.Float32),
    ],
    ids=lambda unit: str(unit.dtype),
)
def test_every_declared_unit_type_goes_through_the_partitions(
    unit: pl.Series, private_tmp: Path, split: Split
) -> None:
    """Partitioning writes the unit column to a file and reads it back: no declared type of the
    unit may make that fail after the reservation, nor change which rows are one unit."""
    table = pl.DataFrame(
        {
            "pid": unit,
            "region": ["a", "b", "z", None] * 10,
            "age": [0, 1, 2, 1] * 10,
            "v": [float(i % 5) for i in range(40)],
            "day": [dt.date(2024, 3, 1)] * 40,
        }
    )
    for grouped in (True, False):
        loaded = parse_spec(spec(grouped, max_rows_per_unit=2))
        whole = aggregates(PolarsEngine(), table, loaded, salt=5)
        assert aggregates(PolarsEngine(rows_per_partition=3), table, loaded, salt=5) == whole
    assert split.partitions == [14, 14]
    assert not any(private_tmp.iterdir())


def test_temporary_files_are_removed_when_the_aggregation_fails(
    private_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = frame([{"pid": i % 5, "region": "a", "age": 0, "v": 1.0, "day": "2024-03-01"}
                   for i in range(20)], pl.Int64())  # fmt: skip
    loaded = parse_spec(spec(max_rows_per_unit=2))
    plan = prepare_release(table, loaded, 1.0, period="2024-03").allocation
    written: list[Path] = []

    def broken(source: Path, **kwargs: Any) -> pl.LazyFrame:
        written.extend(Path(source).parent.iterdir())
        raise OSError("disk failed while reading a partition")

    monkeypatch.setattr(engine_module.pl, "scan_ipc", broken)
    with pytest.raises(DataError):
        PolarsEngine(rows_per_partition=4).aggregate(EngineJob(table, loaded, plan, MONTH), salt=1)
    assert written  # the partitions existed when reading them failed
    assert not any(private_tmp.iterdir())
