"""The polars engine: from confidential rows to exact Int128 aggregates, in bounded memory.

It translates the row plan (`_plan.RowPlan`), one direction: select the plan's columns under
internal names → type them non-strictly → (the private input summary branches off here) → drop
rows with a null unit → period filter → drop keys outside the public domain → each row's integer
units and grid points → bound each unit's contributions (by a salted hash of what each row
contributes) → exact group-by → lay the result on the full key grid (missing groups are 0). The
summary and the aggregation read the input once, together: unpartitioned, as two queries sharing
one scan; partitioned, the summary is tallied batch by batch as the partitioning pass streams.
Every step is total: no value in the data can make it fail, overflow, or change anything but the
aggregates.

Everything up to the bounding is row-local and streams. Bounding needs all of a unit's rows at
once, which would hold the whole input in memory; but units are independent, so an input of more
than `ROWS_PER_PARTITION` rows is split by a salted hash of the unit: one streaming pass writes
the row-local part into private temporary files, one set per partition, then each partition is
bounded and aggregated alone and the integer aggregates are added. Each unit keeps the same rows
whatever the number of partitions, so the result is identical; only memory and time depend on the
row count (PRIVACY.md, assumption 6).

Internal column names start with ':'; the user's column names appear only in the first select,
so no input column can collide with them.
"""

from __future__ import annotations

import tempfile
import threading
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from dprelease.mechanism.engines._contract import (
    EngineJob,
    ExactAggregates,
    InputSummary,
    fingerprint,
)
from dprelease.mechanism.engines._inputs import (
    declared,
    scan,
    withholding_engine_errors,
)
from dprelease.mechanism.engines._plan import (
    DistinctUnits,
    RowPlan,
)
from dprelease.mechanism.engines._polars_rows import (
    _ROWS,
    _UNIT,
    FINGERPRINT_SCHEME,
    FINGERPRINT_SEED,
    _aggregated,
    _as_key,
    _bounded,
    _encoded_dtypes,
    _histogram_sum,
    _histograms,
    _in_domains,
    _in_period,
    _kept,
    _keys,
    _point,
    _row_local,
    _selected,
    _units,
    _value,
    _with_unit_in_period,
)
from dprelease.mechanism.engines._schema import validate_dataset
from dprelease.mechanism.selection import units_per_key

#: Input rows per partition: bounding a partition holds its rows in memory (some 40 bytes a row
#: for a query with two keys and two sums), so peak memory stays flat however long the input.
ROWS_PER_PARTITION = 2_000_000
#: Rows a partition's writer buffers before writing: the partitioning pass holds one such batch
#: per partition. 65,536 rows (about 1 MiB at 18 bytes a row) instead of 8,192: a whole process
#: aggregating 10^7 rows took 0.92x the time at the same peak memory (docs/performance.md,
#: "The polars engine").
_BATCH_ROWS = 65_536


def _summary_plan(selected: pl.LazyFrame, plan: RowPlan) -> pl.LazyFrame:
    """One row of private facts for the operator and the ledger (see `InputSummary`), from the
    same typed rows as the aggregation, so `pl.collect_all` reads the input once for both.
    Every output name is internal, so no user column name can collide with one."""
    month = plan.period

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
        *(in_period(pl.col(key)).is_not_null().sum().alias(key) for key in _keys(plan).values()),
        *(
            in_period(_missing(pl.col(_value(i)))).sum().alias(f":missing{i}")
            for i in range(len(plan.reads))
        ),
    )


def _missing(value: pl.Expr) -> pl.Expr:
    """Where a value column holds no number (null, NaN, text that does not parse): the rows the
    nulls rule fills (`_number`)."""
    return value.cast(pl.Float64, strict=False).fill_nan(None).is_null()


class _Tally:
    """The input summary of typed rows as a streaming pass reads them: `observe` the rows
    (`tally.observe(selected)` in the pass), and each batch's facts (`_summary_plan`,
    the same expressions as a whole scan's) are added up, exactly, in Python integers. So the
    partitioning pass that reads the input for the aggregation also makes its summary and
    fingerprint, from the very rows it partitions, in one read of the input.

    Every fact is a count or a sum over rows (the fingerprint's too: a sum of row hashes), so
    how the rows are split into batches does not change the total."""

    def __init__(self, selected: pl.LazyFrame, plan: RowPlan) -> None:
        self._plan = plan
        self._lock = threading.Lock()  # polars may call from several threads
        nothing = pl.LazyFrame(schema=selected.collect_schema())
        self._batches = [_summary_plan(nothing, plan).collect().row(0, named=True)]

    def observe(self, selected: pl.LazyFrame) -> pl.LazyFrame:
        """`selected`, every batch of it summarized as it streams past (no optimization moves
        a later filter before it, so the summary sees every row)."""
        return selected.map_batches(self._batch, streamable=True)

    def _batch(self, batch: pl.DataFrame) -> pl.DataFrame:
        facts = _summary_plan(batch.lazy(), self._plan).collect().row(0, named=True)
        with self._lock:
            self._batches.append(facts)
        return batch

    def total(self) -> dict[str, int | None]:
        """The summary row of every row observed (a fact that is None in every batch, as the
        unit rows of a spec without a unit, stays None)."""
        with self._lock:
            batches = list(self._batches)
        return {
            name: None
            if all(b[name] is None for b in batches)
            else sum(b[name] for b in batches if b[name] is not None)
            for name in batches[0]
        }


def _summary(row: dict[str, Any], plan: RowPlan) -> InputSummary:
    return InputSummary(
        rows=row[":input_rows"],
        period_rows=row[":period_rows"],
        unit_rows=row[":unit_rows"],
        keyed_rows={column: row[key] for column, key in _keys(plan).items()},
        fingerprint=fingerprint(FINGERPRINT_SCHEME, row[":period_rows"], row[":hash_sum"] or 0),
        missing_rows={c: row[f":missing{i}"] for i, c in enumerate(plan.reads)},
    )


def _partitioned(
    row_local: pl.LazyFrame,
    tally: _Tally,
    keys: list[str],
    plan: RowPlan,
    partitions: int,
    salt: int,
) -> tuple[pl.DataFrame, dict[str, int | None], list[pl.DataFrame]]:
    """The aggregation (and each histogram) as a sum over partitions of the units, in memory for
    one partition, and the input summary, which `tally` makes while the partitions are written
    (`row_local` reads the rows it observes). `keys` are the internal key columns.

    The row-local plan streams into a private temporary directory (mode 0700, removed whether
    this succeeds or fails), one subdirectory per partition that has rows; each is then bounded
    and aggregated alone and added to the total. A unit's rows all land in one partition, in the
    order they had.
    """
    nothing = pl.LazyFrame(schema=row_local.collect_schema())
    total = _aggregated(nothing, plan).collect()  # ungrouped: one row of zeros
    histograms = [[h.collect()] for h in _histograms(nothing, plan)]
    with tempfile.TemporaryDirectory(prefix="dprelease-") as tmp:
        partition = (pl.col(_UNIT).hash(seed=salt) % partitions).alias("partition")
        sink = row_local.sink_ipc(
            pl.PartitionBy(tmp, key=partition, include_key=False),
            record_batch_size=_BATCH_ROWS,
            lazy=True,
        )
        # one read of the input: the summary is tallied batch by batch in the same pass (a
        # second query sharing the scan makes polars 2.1 buffer every row it reads, the memory
        # this function exists to save; a scan of its own read the input twice)
        sink.collect(engine="streaming")
        for directory in sorted(Path(tmp).iterdir()):
            bounded = _kept(_bounded(pl.scan_ipc(directory / "*.ipc"), plan, salt), plan)
            part, *hists = pl.collect_all(
                [_aggregated(bounded, plan), *_histograms(bounded, plan)],
                engine="streaming",
            )
            both = pl.concat([total, part])
            total = both.group_by(keys).agg(pl.all().sum()) if keys else both.sum()
            for parts, hist in zip(histograms, hists, strict=True):
                parts.append(hist)
    summed = [_histogram_sum(parts, plan, i) for i, parts in enumerate(histograms)]
    return total, tally.total(), summed


#: A key column typed as its public domain's keys, as every release types it: what a local-DP
#: release (`dprelease.local`) shares with central ones, so both group by the same keys.
as_key = _as_key


class PolarsEngine:
    """The single-machine engine (streaming polars, partitioned by unit when the input is large)."""

    name = "polars"

    def __init__(self, rows_per_partition: int = ROWS_PER_PARTITION) -> None:
        self.rows_per_partition = rows_per_partition

    def check(self, job: EngineJob) -> None:
        """Validate the declared schema (each file's, in a dataset directory) and let polars
        type the whole plan; reads no rows."""
        plan = job.plan
        with withholding_engine_errors("planning the aggregation"):
            frame = scan(job.data)  # refuses a directory that is not a dataset
            validate_dataset(job.data, plan)
            selected = _selected(frame, declared(job.data), plan)
            bounded = _bounded(_row_local(selected, plan), plan, salt=0)
            for query in (_aggregated(bounded, plan), *_histograms(bounded, plan)):
                query.collect_schema()
            _summary_plan(selected, plan).collect_schema()
        for term in plan.selections:  # key selection's aggregate, run on no rows
            self.distinct_units(job, term, salt=0, rows=0)

    def aggregate(self, job: EngineJob, salt: int) -> ExactAggregates:
        """Run the plan and lay it on the full public key grid, missing groups = 0; the input
        summary is computed alongside."""
        plan = job.plan
        with withholding_engine_errors(f"aggregating the input of release {plan.name!r}"):
            observed, summary, histograms = self._observed(job, salt)
        grid = plan.resolved.key_grid
        internal = grid.cast(_encoded_dtypes(plan)).rename(_keys(plan))
        if grid.width:
            observed = internal.join(
                observed, on=internal.columns, how="left", maintain_order="left"
            )

        def column(vector: str) -> str:
            at = plan.column_of(vector)
            return _ROWS if at is None else _units(at)

        values = {
            name: observed.get_column(column(name)).fill_null(0).alias(name)
            for name in plan.vectors
        }
        cells = internal.with_row_index(":cell")
        laid = {
            point.name: (
                hist.join(cells, on=internal.columns)
                if grid.width
                else hist.with_columns(pl.lit(0).alias(":cell"))
            ).select(
                pl.col(":cell").cast(pl.Int64).alias("cell"),
                pl.col(_point(i)).cast(pl.Int64).alias("point"),
                pl.col(_ROWS).cast(pl.Int64).alias("rows"),
            )
            for i, (point, hist) in enumerate(zip(plan.histograms, histograms, strict=True))
        }
        facts = _summary(summary, plan)
        return ExactAggregates(grid, values, facts, laid)

    def distinct_units(
        self, job: EngineJob, term: DistinctUnits, salt: int, *, rows: int | None = None
    ) -> tuple[pl.DataFrame, np.ndarray]:
        """Key selection's aggregate (`DistinctUnits`) of one selected entry: the rows with a
        unit (each row its own, without a unit column) in the period and the other entries'
        domains, then `selection.units_per_key` over the entry's keys. Private: only the
        selection's draw may see it. `rows=0` runs it on no rows: `check` types it so."""
        plan = job.plan
        names = {c: _keys(plan)[c] for c in term.columns}
        always = plan.resolved.domains[term.group].rename(names)
        with withholding_engine_errors(f"selecting the keys of release {plan.name!r}"):
            selected = _selected(scan(job.data), declared(job.data), plan)
            if rows == 0:
                selected = pl.LazyFrame(schema=selected.collect_schema())
            if plan.unit is None:
                selected = selected.with_row_index(_UNIT)
            kept = _in_domains(_with_unit_in_period(selected, plan), plan, skip=term.group)
            candidates, units = units_per_key(
                kept, _UNIT, list(names.values()), term.max_keys_per_unit, salt,
                always if always.height else None,
            )  # fmt: skip
        return candidates.rename({v: k for k, v in names.items()}), units

    def summarize(self, job: EngineJob) -> InputSummary:
        """The input summary alone (one pass): for a re-run that returns a stored release."""
        plan = job.plan
        with withholding_engine_errors(f"reading the input of release {plan.name!r}"):
            selected = _selected(scan(job.data), declared(job.data), plan)
            row = _summary_plan(selected, plan).collect(engine="streaming")
        return _summary(row.row(0, named=True), plan)

    def _observed(
        self, job: EngineJob, salt: int
    ) -> tuple[pl.DataFrame, dict[str, int | None], list[pl.DataFrame]]:
        """Aggregates of the observed groups, the summary row and each histogram of the observed
        groups; partitioned when bounding all units at once would hold more than
        `rows_per_partition` rows (the count is the input's, before any filter)."""
        plan = job.plan
        lf = scan(job.data)
        selected = _selected(lf, declared(job.data), plan)
        if plan.unit is not None:
            rows = lf.select(pl.len()).collect(engine="streaming").item()
            partitions = -(-rows // self.rows_per_partition)
            if partitions > 1:
                keys = list(_keys(plan).values())
                tally = _Tally(selected, plan)
                row_local = _row_local(tally.observe(selected), plan)
                return _partitioned(row_local, tally, keys, plan, partitions, salt)
        bounded = _bounded(_row_local(selected, plan), plan, salt)  # the queries share its scan
        queries = [_aggregated(bounded, plan), _summary_plan(selected, plan)]
        observed, facts, *histograms = pl.collect_all(
            [*queries, *_histograms(bounded, plan)], engine="streaming"
        )
        return observed, facts.row(0, named=True), histograms
