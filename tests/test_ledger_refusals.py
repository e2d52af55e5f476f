"""What the ledger's outcomes say: a reservation taken over from another run, which the
ledger cannot know to be dead."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner, Result

from dprelease.cli import app
from dprelease.ledger import Ledger, make_release_id
from dprelease.pure_release import prepare
from dprelease.spec import load_spec

SPEC = """\
release:
  name: visits
  source: visits
  privacy_unit: pid
  max_rows_per_unit: 2
  period: {column: day, composition: COMPOSITION}
  group_by:
    - column: region
      domain: {values: [north, south]}
  statistics:
    - {name: n, kind: count}
"""


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    for composition in ("sequential", "parallel"):
        (tmp_path / f"{composition}.yaml").write_text(SPEC.replace("COMPOSITION", composition))
    pl.DataFrame(
        {
            "pid": [1, 2, 3],
            "region": ["north", "south", "south"],
            "day": pl.Series(["2024-01-03", "2024-02-09", "2024-03-11"]).str.to_date(),
        }
    ).write_parquet(tmp_path / "visits.parquet")
    return tmp_path


def release(ws: Path, period: str, *args: str, composition: str = "sequential") -> Result:
    return CliRunner(env={"COLUMNS": "80"}).invoke(
        app,
        [
            "release",
            "--spec",
            str(ws / f"{composition}.yaml"),
            "--data",
            str(ws / "visits.parquet"),
            "--out",
            str(ws / "pub" / period),
            "--period",
            period,
            "--ledger",
            str(ws / "ledger.sqlite"),
            *args,
        ],
    )


def words(text: str) -> str:
    return " ".join(text.split())


# -- a reservation taken over -------------------------------------------------------------------


def test_a_run_that_takes_over_an_open_reservation_does_not_claim_the_other_died(
    ws: Path,
) -> None:
    """The other run may be alive (a concurrent run): the ledger only knows it has not
    committed; the words must say so, not "finished an interrupted release"."""
    ledger = Ledger(str(ws / "ledger.sqlite"))
    ledger.ensure_scope("visits", 1)
    prepared = prepare(
        ws / "visits.parquet", load_spec(ws / "sequential.yaml"), "1/2", period="2024-01"
    )
    release_id = make_release_id("visits", "2024-01")
    ledger.reserve(
        release_id, "visits", "2024-01", "1/2", spec_hash=prepared.spec_hash, run_id="run-a"
    )
    result = release(ws, "2024-01", "--epsilon", "1/2")
    assert result.exit_code == 0, result.output
    text = words(result.stdout)
    assert "interrupted" not in text
    assert (
        f"{release_id}: took over an open reservation of this release made by another run, "
        "which may have died or may still be running (charged once;"
    ) in text
    (event,) = [e for e in ledger.history("visits") if e.kind == "resumed"]
    assert event.detail == (
        "took over the open reservation of run run-a (dead, or still running); not charged again"
    )
    assert ledger.status("visits")[0].spent == Fraction(1, 2)
