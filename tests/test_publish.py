"""reserve → release → commit → write: exactly-once files, no overspend, crash safety."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from fractions import Fraction
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from dprelease.cli import app
from dprelease.errors import BudgetExhausted, UnsafeNoiseSourceError
from dprelease.ledger import Ledger
from dprelease.noise import NoiseSource
from dprelease.publish import RELEASE_FILES, publish
from dprelease.release import prepare
from dprelease.spec import load_spec

SPEC = """\
release:
  name: visits
  source: visits
  privacy_unit: pid
  max_rows_per_unit: 2
  period: {column: day, composition: sequential}
  group_by:
    - column: region
      domain: {values: [n, s, e]}
  statistics:
    - {name: n, kind: count}
    - {name: cost, kind: sum, column: cost, lower: 0, upper: 10}
"""


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "spec.yaml").write_text(SPEC)
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


def _publish(ws: Path, ledger: Ledger, period: str, epsilon: float = 0.25, **kwargs):
    prepared = prepare(ws / "visits.parquet", load_spec(ws / "spec.yaml"), epsilon, period=period)
    return publish(
        prepared,
        ledger=ledger,
        scope="visits",
        asset="visits",
        out_dir=ws / "out" / period,
        **kwargs,
    )


def _snapshot(ledger: Ledger) -> tuple:
    status = ledger.status("visits")[0]
    return status.spent, status.releases, status.open_reservations, len(ledger.history("visits"))


def test_same_release_id_gives_identical_bytes_and_one_charge(workspace: Path) -> None:
    ledger = Ledger(str(workspace / "ledger.sqlite"))
    ledger.ensure_scope("visits", 1)
    first = _publish(workspace, ledger, "2024-01")
    before = {name: (workspace / "out/2024-01" / name).read_bytes() for name in RELEASE_FILES}
    second = _publish(workspace, ledger, "2024-01")
    after = {name: (workspace / "out/2024-01" / name).read_bytes() for name in RELEASE_FILES}
    assert (first.status, second.status) == ("reserved", "committed")
    assert before == after
    assert ledger.status("visits")[0].spent == Fraction(1, 4)
    assert json.loads(after["manifest.json"])["release_id"] == first.release_id


def test_force_new_is_charged_again_and_recorded(workspace: Path) -> None:
    ledger = Ledger(str(workspace / "ledger.sqlite"))
    ledger.ensure_scope("visits", 1)
    _publish(workspace, ledger, "2024-01")
    again = _publish(workspace, ledger, "2024-01", force_new=True)
    assert again.status == "reserved" and again.manifest["ledger"]["rerelease"] is True
    assert ledger.status("visits")[0].spent == Fraction(1, 2)


def test_exhausted_budget_refuses_changes_nothing_and_writes_nothing(workspace: Path) -> None:
    ledger = Ledger(str(workspace / "ledger.sqlite"))
    ledger.ensure_scope("visits", Fraction(1, 2))  # exactly two releases at ε = 1/4
    _publish(workspace, ledger, "2024-01")
    _publish(workspace, ledger, "2024-02")
    before = _snapshot(ledger)
    with pytest.raises(BudgetExhausted) as info:
        _publish(workspace, ledger, "2024-03")
    assert "spent 0.5 of cap 0.5, requested 0.25, remaining 0" in str(info.value)
    assert _snapshot(ledger) == before
    assert not (workspace / "out/2024-03").exists()
    assert (workspace / "out/2024-01/release.csv").exists()


def test_seeded_noise_is_refused_before_any_charge(workspace: Path) -> None:
    ledger = Ledger(str(workspace / "ledger.sqlite"))
    ledger.ensure_scope("visits", 1)
    with pytest.raises(UnsafeNoiseSourceError):
        _publish(workspace, ledger, "2024-01", noise=NoiseSource.seeded_for_tests(3))
    assert ledger.status("visits")[0].spent == 0
    assert not (workspace / "out").exists()


def test_sigkill_between_reserve_and_commit_publishes_nothing_and_resumes(workspace: Path) -> None:
    """The dead run leaves a reservation, no file; the re-run finishes it without a new charge."""
    ledger_path = workspace / "ledger.sqlite"
    Ledger(str(ledger_path)).ensure_scope("visits", 1)
    script = textwrap.dedent(f"""
        import os, signal
        from pathlib import Path
        from dprelease import release as release_module
        from dprelease.ledger import Ledger
        from dprelease.publish import publish
        from dprelease.spec import load_spec

        def die(self, *args, **kwargs):  # the process dies after reserve, before commit
            os.kill(os.getpid(), signal.SIGKILL)

        release_module.PreparedRelease.run = die
        ws = Path({str(workspace)!r})
        prepared = release_module.prepare(ws / "visits.parquet", load_spec(ws / "spec.yaml"),
                                          0.25, period="2024-01")
        publish(prepared, ledger=Ledger({str(ledger_path)!r}), scope="visits", asset="visits",
                out_dir=ws / "out" / "2024-01")
    """)
    dead = subprocess.run([sys.executable, "-c", script], capture_output=True)
    assert dead.returncode == -signal.SIGKILL, dead.stderr.decode()
    ledger = Ledger(str(ledger_path))
    assert ledger.status("visits")[0].open_reservations == 1
    assert not (workspace / "out/2024-01").exists() or not os.listdir(workspace / "out/2024-01")
    resumed = _publish(workspace, ledger, "2024-01")
    assert resumed.status == "resumed"
    status = ledger.status("visits")[0]
    assert (status.spent, status.releases, status.open_reservations) == (Fraction(1, 4), 1, 0)
    assert all((workspace / "out/2024-01" / name).exists() for name in RELEASE_FILES)


runner = CliRunner()


def _cli(*args: str):
    return runner.invoke(app, list(args))


def test_cli_release_writes_files_and_reports_the_ledger(workspace: Path) -> None:
    args = [
        "release",
        "--spec",
        str(workspace / "spec.yaml"),
        "--data",
        str(workspace / "visits.parquet"),
        "--out",
        str(workspace / "pub"),
        "--epsilon",
        "0.5",
        "--cap",
        "1",
        "--period",
        "2024-02",
        "--ledger",
        str(workspace / "l.sqlite"),
    ]
    result = _cli(*args, "--json")
    assert result.exit_code == 0, result.output
    manifest = json.loads(result.stdout)
    assert manifest["epsilon_total"] == 0.5 and manifest["period"] == "2024-02"
    assert sorted(os.listdir(workspace / "pub")) == sorted(RELEASE_FILES)
    table = pl.read_csv(workspace / "pub/release.csv")
    assert table.get_column("region").to_list() == ["n", "s", "e"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("--epsilon", "-1"), "--epsilon"),
        (("--period", "2024-13"), "period"),
        (("--spec", "SPEC_UNKNOWN_COLUMN"), "'colour'"),
        (("--spec", "SPEC_STRING_VALUE"), "'cost'"),
        (("--data", "MISSING"), "not found"),
    ],
)
def test_cli_bad_input_exits_2_with_one_line_and_writes_nothing(
    workspace: Path, change: tuple[str, str], message: str
) -> None:
    (workspace / "unknown.yaml").write_text(SPEC.replace("column: region", "column: colour"))
    (workspace / "string.yaml").write_text(SPEC)
    pl.read_parquet(workspace / "visits.parquet").with_columns(
        pl.col("cost").cast(pl.String)
    ).write_parquet(workspace / "string.parquet")
    values = {
        "--spec": str(workspace / "spec.yaml"),
        "--data": str(workspace / "visits.parquet"),
        "--epsilon": "0.5",
        "--period": "2024-01",
    }
    substitutes = {
        "SPEC_UNKNOWN_COLUMN": str(workspace / "unknown.yaml"),
        "SPEC_STRING_VALUE": str(workspace / "string.yaml"),
        "MISSING": str(workspace / "missing.parquet"),
    }
    values[change[0]] = substitutes.get(change[1], change[1])
    if change[1] == "SPEC_STRING_VALUE":
        values["--data"] = str(workspace / "string.parquet")
    args = [item for pair in values.items() for item in pair]
    result = _cli(
        "release", *args, "--out", str(workspace / "pub"), "--ledger", str(workspace / "l.sqlite")
    )
    assert result.exit_code == 2
    assert message in result.stderr and result.stderr.count("\n") == 1
    assert not (workspace / "pub").exists()
    assert not (workspace / "l.sqlite").exists()  # refused before the ledger was even opened
