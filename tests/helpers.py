"""What the tests share, imported as `from helpers import ...`: building specs, releasing with
test noise, the workspace's confidential table, running the `dprelease` command, the Dagster code
location's resources and in-process runs, and the exact samplers' goodness-of-fit test. Fixtures
live in `conftest.py`.

Tests that check values use the library's own path (`dprelease.publish`: decide the budget,
prepare, draw) with test-only noise sources, which every release path refuses unless told it is
a test (`allow_unsafe_noise=True`); tests of what users do go through the faces (`dp.release`,
the `dprelease` command, Dagster).
"""

from __future__ import annotations

import dataclasses
import io
import multiprocessing
from collections.abc import Callable, Mapping
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl
from typer.testing import CliRunner, Result

from dprelease.change import ProtectedChange, choose_change
from dprelease.cli import app
from dprelease.ledger import Ledger, make_release_id
from dprelease.loss import PrivacyLoss
from dprelease.mechanism import Allocation, DataSource, allocate
from dprelease.mechanism.noise import NoiseSource, _source
from dprelease.publish import (
    PreparedRelease,
    Recorded,
    Release,
    decide_budget,
    prepare,
    record_release,
)
from dprelease.spec import ResolvedSpec, load_spec, parse_spec

if TYPE_CHECKING:
    from dagster import ConfigurableResource, DagsterInstance, Definitions, ExecuteInProcessResult

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


#: Real processes for the race and kill tests, forked from one server process that imported the
#: release path once (a spawned process imported SQLAlchemy, polars and the CLI afresh, seconds
#: each: most of the races tier's time). Each child still opens its own ledger, connections and
#: files after the fork; the server imports no test module, so one preload list serves them all.
RACERS = multiprocessing.get_context("forkserver")
RACERS.set_forkserver_preload(
    ["dprelease.cli", "dprelease.publish", "dprelease.statement", "dprelease.ledger", "polars"]
)


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


# -- the Dagster code location (`pipelines/`) ----------------------------------------------------
# Dagster is imported inside these helpers: most tests that import this module never run it.

#: The demo's monthly release, its budget scope, and the privacy YAML the demo ships.
MONTHLY = "visits_by_clinic"
SCOPE = "hospital_patients"
PIPELINE_SPECS = ROOT / "pipelines" / "specs"
PRIVACY = ROOT / "pipelines" / "privacy.yaml"
VISITS_CAP = Fraction(4)  # pipelines/privacy.yaml, scope hospital_patients: ½ ln 3000 → 4.0
STUDY_CAP = Fraction(3, 10)  # default profile (the paper's): ½ ln 2 rounded down to 0.30


def write_tables(directory: Path, *, patients: int = 4_000, seed: int = 7) -> None:
    """The demo's confidential tables (`case_control`, `visits`) as parquet in `directory`."""
    from pipelines.demo_data import generate_case_control, generate_visits

    directory.mkdir(parents=True, exist_ok=True)
    generate_case_control().write_parquet(directory / "case_control.parquet")
    generate_visits(seed=seed, n_patients=patients).write_parquet(directory / "visits.parquet")


def resources(
    root: Path, confidential: Path | None = None, privacy: Path = PRIVACY, **ledger: Any
) -> dict[str, ConfigurableResource]:
    """The code location's resources under `root`: `confidential/` (unless given), `public/`
    and `ledger.sqlite`, with the demo's privacy YAML (unless given)."""
    from pipelines.resources import ConfidentialStore, LedgerResource, PrivacyPolicy, PublicStore

    return {
        "confidential": ConfidentialStore(directory=str(confidential or root / "confidential")),
        "public": PublicStore(directory=str(root / "public")),
        "ledger": LedgerResource(url=str(root / "ledger.sqlite"), **ledger),
        "policy": PrivacyPolicy(config_path=str(privacy)),
    }


def materialize(
    defs: Definitions,
    instance: DagsterInstance,
    selection: list[str],
    partition: str | None = None,
    config: dict[str, Any] | None = None,
) -> ExecuteInProcessResult:
    """Materialize `selection` (of one partition) in process, as a UI launch would; run config
    `config` for each selected release; failures are returned, not raised."""
    import dagster as dg

    return dg.materialize(
        [a for a in defs.assets or [] if isinstance(a, dg.AssetsDefinition)],
        instance=instance,
        resources=dict(defs.resources or {}),
        selection=selection,
        partition_key=partition,
        run_config={"ops": {name: {"config": config} for name in selection}} if config else None,
        raise_on_error=False,
    )


def spent(root: Path, scope: str) -> tuple[Fraction, int]:
    """(spent, committed releases) of `scope` in `root`'s ledger."""
    status = Ledger(str(root / "ledger.sqlite")).status(scope)[0]
    return status.spent, status.releases


def failure(result: ExecuteInProcessResult) -> str:
    """The message of a run's first failed step."""
    import dagster as dg

    error = result.get_step_failure_events()[0].event_specific_data.error
    return error.message.removeprefix(f"{dg.Failure.__module__}.Failure: ").rstrip("\n")


def files(directory: Path) -> dict[str, bytes]:
    """Every file of `directory` by name, with its bytes."""
    return {p.name: p.read_bytes() for p in directory.iterdir()}


def prepared_month(
    root: Path, book: Ledger, period: str, spec: Path = PIPELINE_SPECS / "visits_monthly.yaml"
) -> PreparedRelease:
    """The monthly release of `period` at ε = VISITS_CAP / 12, its scope in `book`."""
    book.ensure_scope(SCOPE, VISITS_CAP)
    release = load_spec(spec, require_publish=True)
    budget = decide_budget(release, ledger=book, epsilon=VISITS_CAP / 12)
    return prepare(root / "confidential/visits.parquet", release, budget, period=period)


def record_unpublished(root: Path, period: str, **options: Any) -> Recorded:
    """Record a month as a run that crashed after the ledger commit leaves it: stored, no files."""
    with Ledger(str(root / "ledger.sqlite")) as book:
        prepared = prepared_month(root, book, period)
        return record_release(prepared, ledger=book, asset=MONTHLY, **options)


def stored_with_a_cut_table(
    root: Path,
    period: str,
    cut: Callable[[pl.DataFrame], pl.DataFrame],
    spec: Path = PIPELINE_SPECS / "visits_monthly.yaml",
) -> None:
    """A stored copy whose table lost rows (`cut`), committed through the ledger's API (as an
    engine that dropped empty cells, or another tool, could have stored it)."""
    with Ledger(str(root / "ledger.sqlite")) as book:
        prepared = prepared_month(root, book, period, spec)
        reservation = book.reserve(
            make_release_id(MONTHLY, period),
            SCOPE,
            period,
            prepared.allocation.total.epsilon,
            spec_hash=prepared.resolved.hash,
        )
        released = prepared.draw()
        table = io.BytesIO()
        cut(released.table).write_parquet(table)
        manifest = released.manifest.model_copy(update={"release_id": reservation.release_id})
        book.commit(reservation, table.getvalue(), manifest.to_json_dict())


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
