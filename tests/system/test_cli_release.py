"""`dprelease release`: files, the printed table and ledger words, exact ε options, new scopes,
and the one-line exit-2 contract, through the real `dprelease` app."""

from __future__ import annotations

import json
import os
from fractions import Fraction
from pathlib import Path

import polars as pl
import pytest
from helpers import ROOT, invoke_cli, one_line_error, release_args, words, write_visits
from typer.testing import Result

from dprelease.ledger import Ledger
from dprelease.publish import RELEASE_FILES

SPEC = """\
release:
  name: visits
  source: visits
  privacy_unit: pid
  max_rows_per_unit: 2
  period: {column: day, composition: sequential}
  group_by:
    - column: region
      domain: {values: [north_east_coastal_region, south, east]}
  statistics:
    - {name: n, kind: count}
    - {name: cost, kind: sum, column: cost, lower: 0, upper: 1000}
"""
PRIVACY = ROOT / "examples" / "case_control.yaml"  # ε = 0.3


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    (tmp_path / "spec.yaml").write_text(SPEC)
    write_visits(
        tmp_path,
        ["2024-01-03", "2024-01-09", "2024-02-01", "2024-02-02", "2024-03-05"],
        pid=[1, 2, 3, 3, 4],
        region=["north_east_coastal_region", "south", "south", "south", "east"],
        cost=[100.0, 200.0, 300.0, 400.0, 500.0],
    )
    return tmp_path


def cli(ws: Path, *args: str, period: str = "2024-02", columns: int = 80) -> Result:
    flags = release_args(ws, period, ledger=ws / "l.sqlite")
    return invoke_cli("release", *flags, *args, columns=columns)


def test_release_writes_files_and_json_manifest(ws: Path) -> None:
    result = cli(ws, "--epsilon", "0.5", "--cap", "1", "--json")
    assert result.exit_code == 0, result.output
    manifest = json.loads(result.stdout)
    assert manifest["epsilon_total"] == 0.5 and manifest["period"] == "2024-02"
    assert manifest["release_id"] == "visits/2024-02"
    assert sorted(os.listdir(ws / "pub/2024-02")) == sorted(RELEASE_FILES)
    table = pl.read_csv(ws / "pub/2024-02/release.csv")
    assert table.get_column("region").to_list() == ["north_east_coastal_region", "south", "east"]


def test_release_prints_the_table_where_files_went_and_what_the_ledger_did(ws: Path) -> None:
    first = cli(ws, "--epsilon", "1/4", "--cap", "1")
    assert first.exit_code == 0, first.output
    out = words(first.stdout)
    assert "north_east_coastal_region" in out and "cost" in out  # the released table
    assert "cost_moe95" not in out  # margins are left to the files
    assert "3 rows; every row and the 95% margins of error are in release.csv" in out
    assert "visits/2024-02: released and charged" in out
    assert "this release: ε = 0.25; scope 'visits' has ε = 0.75 of its cap ε = 1 left" in out
    assert f"files in {ws / 'pub/2024-02'}: release.parquet, release.csv, manifest.json" in out
    assert (
        words(first.stderr).count(
            "new budget scope 'visits': lifetime cap ε = 1 (sequential, add_remove neighbours, "
            "privacy unit column 'pid')"
        )
        == 1
    )
    assert "created a new, empty ledger" in first.stderr
    assert all(len(line) <= 80 for line in first.stdout.splitlines() if str(ws) not in line)

    again = cli(ws, "--epsilon", "0.5")  # ε differs now: stored copy, nothing charged
    assert again.exit_code == 0, again.output
    out = words(again.stdout)
    assert "visits/2024-02: already released on " in out
    assert "stored copy returned, nothing charged" in out
    assert "stored with ε = 0.25; this run asked for ε = 0.5" in out
    assert "ε = 0.75 of its cap ε = 1 left" in out


def test_long_tables_are_shortened_in_the_terminal_only(ws: Path) -> None:
    regions = [f"r{i:02d}" for i in range(30)]
    (ws / "spec.yaml").write_text(
        SPEC.replace("[north_east_coastal_region, south, east]", "[" + ", ".join(regions) + "]")
    )
    result = cli(ws, "--epsilon", "1", "--cap", "1")
    assert result.exit_code == 0, result.output
    assert "first 12 of 30 rows; every row" in words(result.stdout)
    assert "r11" in result.stdout and "r12" not in result.stdout
    assert pl.read_csv(ws / "pub/2024-02/release.csv").height == 30


def test_a_release_with_margins_shows_each_level(ws: Path) -> None:
    regions = [f"r{i:02d}" for i in range(30)]
    (ws / "spec.yaml").write_text(
        SPEC.replace(
            "[north_east_coastal_region, south, east]", "[" + ", ".join(regions) + "]"
        ).replace("  statistics:", "  margins: [[]]\n  statistics:")
    )
    result = cli(ws, "--epsilon", "1", "--cap", "1")
    assert result.exit_code == 0, result.output
    out = words(result.stdout)
    assert "first 12 of 30 rows of region, 1 row of total; every row" in out
    assert "r11" in result.stdout and "r12" not in result.stdout and "│ total " in result.stdout
    table = pl.read_csv(ws / "pub/2024-02/release.csv")
    assert table.height == 31 and table.get_column("level").to_list()[-1] == "total"
    assert table.get_column("n").sum() == 2 * table.get_column("n")[-1]  # it adds up


@pytest.mark.parametrize("option", ["--epsilon", "--cap"])
@pytest.mark.parametrize("bad", ["abc", "-1", "0", "nan", "1/0"])
def test_bad_epsilon_is_one_line(ws: Path, option: str, bad: str) -> None:
    args = {"--epsilon": "0.5", "--cap": "1"} | {option: bad}
    result = cli(ws, *(item for pair in args.items() for item in pair))
    one_line_error(result, option, repr(bad))
    assert not (ws / "l.sqlite").exists() and not (ws / "pub").exists()


def test_epsilon_is_exact_as_typed(ws: Path) -> None:
    result = cli(ws, "--epsilon", "1/10", "--cap", "3/10", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["epsilon_total_exact"] == "1/10"
    for period in ("2024-01", "2024-03"):  # three tenths fit a cap of 3/10 exactly
        assert cli(ws, "--epsilon", "0.1", period=period).exit_code == 0
    assert Ledger(str(ws / "l.sqlite")).status("visits")[0].remaining == 0


def test_a_new_scope_needs_a_cap_and_nothing_is_created(ws: Path) -> None:
    result = cli(ws, "--epsilon", "0.5")
    one_line_error(result, "--cap", "budget scope 'visits' is new", "--config")
    assert not (ws / "l.sqlite").exists() and not (ws / "pub").exists()

    Ledger(str(ws / "l.sqlite")).ensure_scope("other", 1)  # the ledger exists, the scope not
    result = cli(ws, "--epsilon", "0.5")
    one_line_error(result, "budget scope 'visits' is new")
    assert [s.name for s in Ledger(str(ws / "l.sqlite")).status()] == ["other"]


def test_an_existing_scope_keeps_its_cap(ws: Path) -> None:
    assert cli(ws, "--epsilon", "0.25", "--cap", "1").exit_code == 0
    result = cli(ws, "--epsilon", "0.25", "--cap", "2", period="2024-03")
    assert result.exit_code == 0, result.output
    assert "keeps its cap ε = 1 from the ledger (not --cap 2)" in result.stderr
    assert Ledger(str(ws / "l.sqlite")).status("visits")[0].cap == 1


def test_without_epsilon_a_release_spends_the_ledgers_cap_not_the_stated_one(ws: Path) -> None:
    """Intended since the restructure: ε defaults to the cap in force, which for an existing
    scope is the ledger's (the source of truth), not --cap's."""
    Ledger(str(ws / "l.sqlite")).ensure_scope("visits", Fraction(1, 2))
    result = cli(ws, "--cap", "2", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["epsilon_total_exact"] == "1/2"
    assert "keeps its cap ε = 0.5 from the ledger (not --cap 2)" in result.stderr
    assert Ledger(str(ws / "l.sqlite")).status("visits")[0].remaining == 0


def test_release_with_a_privacy_config(ws: Path) -> None:
    result = cli(ws, "--config", str(PRIVACY), "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["epsilon_total_exact"] == "3/10"
    ledger = Ledger(str(ws / "l.sqlite"))
    assert ledger.status("visits")[0].cap == pytest.approx(0.3)

    ledger.set_cap("visits", 1, reason="above what the profile allows")
    refused = cli(ws, "--config", str(PRIVACY), "--epsilon", "0.1", period="2024-03")
    one_line_error(refused, "more than the privacy profile allows", "set-cap visits 0.3 ")
    rerun = cli(ws, "--config", str(PRIVACY))  # a released period never fails
    assert rerun.exit_code == 0 and "already released on" in words(rerun.stdout)
    too_big = cli(ws, "--config", str(PRIVACY), "--cap", "0.5", period="2024-03")
    one_line_error(too_big, "--cap", "exceeds the ε the privacy profile allows")


def test_release_with_a_privacy_config_uses_the_scopes_own_profile(ws: Path) -> None:
    """A scope listed under `scopes:` gets its own profile's ε; any other scope the default."""
    config = ws / "privacy.yaml"
    config.write_text(
        PRIVACY.read_text()
        + "scopes:\n  visits:\n    profile: {kind: constant, bound: 20}\n    rounding: 0.05\n"
    )
    own = cli(ws, "--config", str(config), "--json")  # scope: the spec's name, `visits`
    assert own.exit_code == 0, own.output
    assert json.loads(own.stdout)["epsilon_total_exact"] == "29/20"  # ½ ln 20 ≈ 1.498 → 1.45
    other = cli(ws, "--config", str(config), "--scope", "study", "--json", period="2024-03")
    assert other.exit_code == 0, other.output
    assert json.loads(other.stdout)["epsilon_total_exact"] == "3/10"  # `privacy:`
    ledger = Ledger(str(ws / "l.sqlite"))
    assert [(s.name, s.cap) for s in ledger.status()] == [
        ("study", Fraction(3, 10)),
        ("visits", Fraction(29, 20)),
    ]


def test_a_changed_spec_is_refused_with_exit_2_and_force_new_charges(ws: Path) -> None:
    assert cli(ws, "--epsilon", "0.25", "--cap", "1").exit_code == 0
    (ws / "spec.yaml").write_text(SPEC.replace("upper: 1000", "upper: 2000"))
    one_line_error(cli(ws, "--epsilon", "0.25"), "--force-new", "visits/2024-02")
    forced = cli(ws, "--epsilon", "0.25", "--force-new")
    assert forced.exit_code == 0 and "released and charged" in words(forced.stdout)
    assert Ledger(str(ws / "l.sqlite")).status("visits")[0].spent == 0.5


def test_a_parallel_scope_refuses_a_sequential_spec(ws: Path) -> None:
    Ledger(str(ws / "l.sqlite")).ensure_scope("visits", 1, "parallel")
    one_line_error(cli(ws, "--epsilon", "0.25"), "composes periods 'parallel'")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("--period", "2024-13"), "period"),
        (("--spec", "SPEC_UNKNOWN_COLUMN"), "'colour'"),
        (("--spec", "SPEC_STRING_VALUE"), "'cost'"),
        (("--data", "MISSING"), "not found"),
    ],
)
def test_bad_input_exits_2_with_one_line_and_writes_nothing(
    ws: Path, change: tuple[str, str], message: str
) -> None:
    (ws / "unknown.yaml").write_text(SPEC.replace("column: region", "column: colour"))
    (ws / "string.yaml").write_text(SPEC)
    pl.read_parquet(ws / "visits.parquet").with_columns(
        pl.col("cost").cast(pl.String)
    ).write_parquet(ws / "string.parquet")
    substitutes = {
        "SPEC_UNKNOWN_COLUMN": str(ws / "unknown.yaml"),
        "SPEC_STRING_VALUE": str(ws / "string.yaml"),
        "MISSING": str(ws / "missing.parquet"),
    }
    args = [change[0], substitutes.get(change[1], change[1])]
    if change[1] == "SPEC_STRING_VALUE":
        args += ["--data", str(ws / "string.parquet")]
    one_line_error(cli(ws, "--epsilon", "0.5", "--cap", "1", *args), message)
    assert not (ws / "pub").exists()
    assert not (ws / "l.sqlite").exists()  # refused before the ledger was even opened
