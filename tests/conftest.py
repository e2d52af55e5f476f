"""Fixtures the tests share; the helpers they import are in `helpers.py`.

Tiers (see docs/testing.md, "The tiers"): `python3 dev.py test` runs the fast tier, everything
not marked `e2e` (a real `dg dev` and browser), `spark` (a local Spark session) or `races` (real
processes racing on a ledger); `python3 dev.py test --all` (and CI) runs every tier.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import WORKSPACE_SPEC, write_tables, write_visits
from pgtest import BACKENDS, backend_url

#: The slow tiers' markers; a test with none of them is in the fast tier.
SLOW_TIERS = ("e2e", "spark", "races")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each test's report names its tier, for the time per tier at the end of the run."""
    for item in items:
        tier = next((m for m in SLOW_TIERS if item.get_closest_marker(m)), "fast")
        item.user_properties.append(("tier", tier))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The time of each tier's tests (setup, call and teardown summed, so more than the wall time
    when workers run side by side): a CI log shows which tier grew."""
    seconds: Counter[str] = Counter()
    for reports in terminalreporter.stats.values():
        for report in reports:
            if isinstance(report, pytest.TestReport):
                seconds[dict(report.user_properties).get("tier", "fast")] += report.duration
    if seconds:
        shown = ", ".join(f"{tier} {total:.0f} s" for tier, total in seconds.most_common())
        terminalreporter.write_line(f"test time per tier: {shown}")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A directory with `spec.yaml` (WORKSPACE_SPEC) and its confidential `visits.parquet`."""
    (tmp_path / "spec.yaml").write_text(WORKSPACE_SPEC)
    write_visits(
        tmp_path,
        ["2024-01-03", "2024-01-09", "2024-02-01", "2024-02-02", "2024-03-05"],
        pid=[1, 2, 3, 3, 4],
        region=["n", "s", "s", "s", "n"],
        cost=[1.0, 2.0, 3.0, 4.0, 5.0],
    )
    return tmp_path


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A directory for the Dagster code location: the demo's tables in `confidential/` (see
    `helpers.resources` for the rest)."""
    write_tables(tmp_path / "confidential")
    return tmp_path


@pytest.fixture(params=BACKENDS)
def ledger_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty ledger URL on each backend: a SQLite file, and PostgreSQL (see pgtest)."""
    yield from backend_url(request, tmp_path)
