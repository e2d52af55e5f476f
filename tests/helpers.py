"""What the tests share, imported as `from helpers import ...`: building specs, releasing with
test noise, the workspace's confidential table, running the `dprelease` command, and the exact
samplers' goodness-of-fit test. Fixtures live in `conftest.py`.

Tests that check values use the library's own path (`dprelease.publish`: decide the budget,
prepare, draw) with test-only noise sources, which every release path refuses unless told it is
a test (`allow_unsafe_noise=True`); tests of what users do go through the faces (`dp.release`,
the `dprelease` command, Dagster).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from typer.testing import CliRunner, Result

from dprelease.change import ProtectedChange, choose_change
from dprelease.cli import app
from dprelease.loss import PrivacyLoss
from dprelease.mechanism import Allocation, DataSource, allocate
from dprelease.mechanism.noise import NoiseSource, _source
from dprelease.publish import PreparedRelease, Release, decide_budget, prepare
from dprelease.spec import ResolvedSpec, parse_spec

#: Every draw is 0: the released values are the exact aggregates.
ZERO = NoiseSource.zero_for_tests

#: A small release most tests start from: rows per patient, counted and summed by region.
BASE_SPEC: dict[str, Any] = {
    "name": "t",
    "source": "t",
    "privacy_unit": "pid",
    "max_rows_per_unit": 2,
    "group_by": [{"column": "region", "domain": {"values": ["n", "s", "e"]}}],
    "statistics": [
        {"name": "n", "kind": "count"},
        {"name": "cost", "kind": "sum", "column": "cost", "lower": 0, "upper": 100},
    ],
}


def make_spec(base: Mapping[str, Any] = BASE_SPEC, /, **overrides: Any) -> ResolvedSpec:
    """A resolved spec from a `release:` mapping, with top-level fields replaced."""
    return parse_spec({**base, **overrides})


def prepare_release(
    data: DataSource,
    spec: ResolvedSpec,
    epsilon: float | Fraction | str = 1,
    *,
    neighbours: ProtectedChange | None = None,
    period: str | None = None,
    engine: str | None = None,
) -> PreparedRelease:
    """A prepared release at `epsilon`, as `dprelease.publish` prepares one; `neighbours` plays
    the privacy configuration's protected change (the spec's own wins, and they must agree)."""
    budget = decide_budget(spec, epsilon=Fraction(str(epsilon)))
    if neighbours is not None:
        budget = dataclasses.replace(budget, change=choose_change(spec.spec.neighbours, neighbours))
    return prepare(data, spec, budget, period=period, engine=engine)


def draw_release(
    data: DataSource,
    spec: ResolvedSpec,
    epsilon: float | Fraction | str = 1,
    *,
    noise: NoiseSource | None = None,
    **options: Any,
) -> Release:
    """A release drawn with test noise (zero noise by default): not private, tests only."""
    prepared = prepare_release(data, spec, epsilon, **options)
    return prepared.draw(noise or ZERO(), allow_unsafe_noise=True)


def exact_table(data: DataSource, spec: ResolvedSpec, epsilon: float = 1, **options: Any):
    """The released table without noise: the exact aggregates, post-processed."""
    return draw_release(data, spec, epsilon, **options).table


def allocation_of(
    spec: ResolvedSpec,
    epsilon: float | Fraction = 1,
    neighbours: ProtectedChange = ProtectedChange.ADD_REMOVE,
) -> Allocation:
    """The allocation of `epsilon` over the spec's statistics (no data)."""
    return allocate(spec, PrivacyLoss.pure(Fraction(epsilon)), neighbours)


#: The workspace's spec file: monthly visits by region, counts and costs.
WORKSPACE_SPEC = """\
release:
  name: visits
  source: visits
  privacy_unit: pid
  max_rows_per_unit: 2
  period: {column: day, every: month}
  group_by:
    - column: region
      domain: {values: [n, s, e]}
  statistics:
    - {name: n, kind: count}
    - {name: cost, kind: sum, column: cost, lower: 0, upper: 10}
"""


def write_visits(directory: Path, days: list[str], **columns: list[Any]) -> None:
    """A workspace's confidential `visits.parquet`: `columns` as given, then `day` from ISO
    dates (a spec's `period:` column must be a date)."""
    table = pl.DataFrame({**columns, "day": pl.Series(days).str.to_date()})
    table.write_parquet(directory / "visits.parquet")


#: The checkout's root, for the repository's own files (examples, specs, docs).
ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"


# -- the `dprelease` command --------------------------------------------------------------------


def invoke_cli(*args: str, columns: int = 80) -> Result:
    """The real `dprelease` app on `args`, in a terminal `columns` wide."""
    return CliRunner(env={"COLUMNS": str(columns)}).invoke(app, list(args))


def release_args(
    ws: Path, period: str, *, spec: str = "spec.yaml", ledger: Path | None = None
) -> list[str]:
    """`dprelease release` options for a workspace: its `spec` file and `visits.parquet`, the
    files to `pub/<period>`, and `ledger` (default: `ledger.sqlite` in the workspace)."""
    return [
        "--spec",
        str(ws / spec),
        "--data",
        str(ws / "visits.parquet"),
        "--out",
        str(ws / "pub" / period),
        "--period",
        period,
        "--ledger",
        str(ws / "ledger.sqlite" if ledger is None else ledger),
    ]


def words(text: str) -> str:
    """Output with rich's line wrapping undone, for phrase checks."""
    return " ".join(text.split())


def one_line_error(result: Result, *words: str) -> str:
    """The exit-2 contract: one `error:` line on stderr, no traceback or rich box, naming
    `words`; returns that line."""
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: "), result.stderr
    assert "Traceback" not in result.output and "╭" not in result.output
    for word in words:
        assert word in result.stderr, result.stderr
    return result.stderr


# -- the exact samplers ---------------------------------------------------------------------------


def seeded_stream(seed: int) -> _source._BitStream:
    """A bit stream for the samplers' private helpers, read from a seeded source."""
    open_stream = NoiseSource.seeded_for_tests(seed)._open_stream
    assert open_stream is not None
    return _source._BitStream(open_stream())


def chi2_pvalue_of_pmf(draws: np.ndarray, z: np.ndarray, pmf: np.ndarray) -> float:
    """χ² goodness of fit of integer draws to an exact pmf on the support `z` (wide enough that
    what lies beyond it is negligible): one cell per integer with expected count ≥ 5, each tail
    merged."""
    from scipy import stats  # SciPy takes most of a second: loaded by the sampler tests only

    n = draws.size
    inner = z[n * pmf >= 5]
    lo, hi = int(inner.min()), int(inner.max())
    observed = np.bincount(np.clip(draws, lo - 1, hi + 1) - (lo - 1), minlength=hi - lo + 3)
    central = pmf[(z >= lo) & (z <= hi)]
    tail = (1.0 - central.sum()) / 2.0  # the two tails are symmetric
    expected = n * np.concatenate([[tail], central, [tail]])
    if expected[0] < 5:  # tails too light to stand alone: merge them into the outermost cells
        observed = np.concatenate([[observed[:2].sum()], observed[2:-2], [observed[-2:].sum()]])
        expected = np.concatenate([[expected[:2].sum()], expected[2:-2], [expected[-2:].sum()]])
    statistic = float(((observed - expected) ** 2 / expected).sum())
    return float(stats.chi2.sf(statistic, df=expected.size - 1))
