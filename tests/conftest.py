"""What the tests share: building specs, releasing with test noise, a workspace with a small
confidential table, and the ledger backends.

Tiers (see README, "Tests"): `python3 dev.py test` runs the fast tier, everything not marked
`e2e` (a real `dg dev` and browser), `spark` (a local Spark session) or `races` (real processes
racing on a ledger); `python3 dev.py test --all` (and CI) runs every tier.

Tests that check values use the library's own path (`dprelease.publish`: decide the budget,
prepare, draw) with test-only noise sources, which every release path refuses unless told it is
a test (`allow_unsafe_noise=True`); tests of what users do go through the faces (`dp.release`,
the `dprelease` command, Dagster).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from fractions import Fraction
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from pgtest import BACKENDS, backend_url

from dprelease.change import ProtectedChange, choose_change
from dprelease.loss import PrivacyLoss
from dprelease.mechanism import Allocation, DataSource, allocate
from dprelease.mechanism.noise import NoiseSource
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


@pytest.fixture
def spec_builder() -> Callable[..., ResolvedSpec]:
    """`make_spec`: a resolved spec from a mapping (default `BASE_SPEC`) and overrides."""
    return make_spec


@pytest.fixture
def zero_release() -> Callable[..., pl.DataFrame]:
    """`exact_table`: release a spec with zero noise and return the table."""
    return exact_table


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


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A directory with `spec.yaml` (WORKSPACE_SPEC) and its confidential `visits.parquet`."""
    (tmp_path / "spec.yaml").write_text(WORKSPACE_SPEC)
    pl.DataFrame(
        {
            "pid": [1, 2, 3, 3, 4],
            "region": ["n", "s", "s", "s", "n"],
            "cost": [1.0, 2.0, 3.0, 4.0, 5.0],
            "day": pl.Series(
                ["2024-01-03", "2024-01-09", "2024-02-01", "2024-02-02", "2024-03-05"]
            ).str.to_date(),
        }
    ).write_parquet(tmp_path / "visits.parquet")
    return tmp_path


@pytest.fixture(params=BACKENDS)
def ledger_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty ledger URL on each backend: a SQLite file, and PostgreSQL (see pgtest)."""
    yield from backend_url(request, tmp_path)


#: The checkout's root, for the repository's own files (examples, specs, docs).
ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
