"""A scope keeps for life what its guarantee rests on: the neighbours its cap was chosen for, who
a privacy unit is, and (parallel periods) the partition into periods, as it keeps its measure,
δ and composition. A release that differs is refused in one line, before anything is charged or
written; and a refused first release leaves no scope behind. Through the command line and
`dp.release`, on SQLite and PostgreSQL.

The outsider's case: a scope opened under `neighbours: substitute` (cap ln B) took a later CLI
release made without the privacy YAML, calibrated for add/remove but charged as substitute, so
a value change cost e^{2ε}: at B = 3 the scope's odds factor reached 5.46."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import polars as pl
import pytest
from helpers import invoke_cli, one_line_error, write_visits

import dprelease as dp
from dprelease.errors import CompositionMismatch, NeighboursMismatch, PrivacyUnitMismatch

SPEC = """\
release:
  name: NAME
  source: visits
  UNIT
  period: {column: PERIOD, composition: COMPOSITION}
  group_by:
    - column: region
      domain: {values: [n, s]}
  statistics:
    - {name: n, kind: count}
"""
SUBSTITUTE = "privacy:\n  neighbours: substitute\n  profile: {kind: constant, bound: 3}\n"
ZCDP = (
    "privacy:\n  profile: {kind: constant, bound: 3}\n  measure: zcdp\n  delta: 1.0e-9\n"
    "  rounding: 0.001\n"
)


def spec_text(
    name: str,
    unit: str = "privacy_unit: pid\n  max_rows_per_unit: 2",
    period: str = "day",
    composition: str = "sequential",
) -> str:
    return (
        SPEC.replace("NAME", name)
        .replace("UNIT", unit)
        .replace("PERIOD", period)
        .replace("COMPOSITION", composition)
    )


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    (tmp_path / "first.yaml").write_text(spec_text("first"))
    (tmp_path / "second.yaml").write_text(spec_text("second"))
    (tmp_path / "substitute.yaml").write_text(SUBSTITUTE)
    (tmp_path / "zcdp.yaml").write_text(ZCDP)
    write_visits(
        tmp_path,
        ["2024-01-03", "2024-01-09", "2024-01-11"],
        pid=[1, 2, 3],
        hh=[1, 1, 2],
        region=["n", "s", "s"],
    )
    table = pl.read_parquet(tmp_path / "visits.parquet")
    table.with_columns(day2=pl.col("day")).write_parquet(tmp_path / "visits.parquet")
    return tmp_path


def release(ws: Path, url: str, spec: str, *args: str, period: str = "2024-01"):  # noqa: ANN201
    return invoke_cli(
        "release",
        *("--spec", str(ws / spec), "--data", str(ws / "visits.parquet")),
        *("--out", str(ws / "out" / spec / period), "--period", period, "--ledger", url),
        *args,
    )


def ledger_state(url: str) -> tuple[list[tuple[str, str]], int]:
    """Each scope with what it has spent, and how many events the history holds."""
    with dp.Ledger(url, mode="read") as ledger:
        scopes = [(s.name, str(s.spent)) for s in ledger.status()]
        return scopes, len(ledger.history())


# -- neighbours ---------------------------------------------------------------------------------


def test_a_cli_release_without_the_privacy_yaml_is_refused_by_a_substitute_scope(
    ws: Path, ledger_url: str
) -> None:
    """The outsider's exact scenario: a substitute scope opened with the privacy YAML, then a
    release from the command line without --config (calibrated for add/remove)."""
    opened = release(ws, ledger_url, "first.yaml", "--config", str(ws / "substitute.yaml"),
                     "--epsilon", "0.25")  # fmt: skip
    assert opened.exit_code == 0, opened.output
    before = ledger_state(ledger_url)
    assert [name for name, _ in before[0]] == ["first"]

    result = release(ws, ledger_url, "second.yaml", "--scope", "first", "--epsilon", "0.5")
    line = one_line_error(result, "'first'", "substitute", "add_remove", "neighbours")
    assert "--config" in line and "nothing was charged" in line
    assert ledger_state(ledger_url) == before  # nothing charged, no event
    assert not (ws / "out" / "second.yaml").exists()  # nothing written

    # what the line says to do works: the profile that opened the scope, or the spec's word
    again = release(ws, ledger_url, "second.yaml", "--scope", "first", "--config",
                    str(ws / "substitute.yaml"), "--epsilon", "0.5")  # fmt: skip
    assert again.exit_code == 0, again.output


def test_the_api_refuses_the_same_mix_and_charges_nothing(ws: Path, ledger_url: str) -> None:
    data = pl.read_parquet(ws / "visits.parquet").to_pandas()
    dp.Ledger(ledger_url).close()
    first = dp.release(data, ws / "first.yaml", privacy=ws / "substitute.yaml",
                       ledger=ledger_url, period="2024-01", epsilon=0.25)  # fmt: skip
    assert first.manifest.neighbours is dp.ProtectedChange.SUBSTITUTE
    before = ledger_state(ledger_url)
    with pytest.raises(NeighboursMismatch, match="substitute"):
        dp.release(data, ws / "second.yaml", ledger=ledger_url, scope="first", epsilon=0.5,
                   period="2024-01")  # fmt: skip
    assert ledger_state(ledger_url) == before
    # the spec saying `neighbours: substitute` is calibrated for it, and is taken
    (ws / "third.yaml").write_text(spec_text("third") + "  neighbours: substitute\n")
    third = dp.release(data, ws / "third.yaml", ledger=ledger_url, scope="first",
                       epsilon=0.25, period="2024-01")  # fmt: skip
    assert third.charged and third.manifest.neighbours is dp.ProtectedChange.SUBSTITUTE


# -- the privacy unit ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("unit", "words"),
    [
        ("", ("each row", "privacy_unit: pid")),  # row-level: no privacy_unit
        ("privacy_unit: hh\n  max_rows_per_unit: 2", ("column 'hh'", "privacy_unit: pid")),
    ],
)
def test_a_release_for_another_privacy_unit_is_refused(
    ws: Path, ledger_url: str, unit: str, words: tuple[str, ...]
) -> None:
    assert release(ws, ledger_url, "first.yaml", "--epsilon", "1/4", "--cap", "1").exit_code == 0
    (ws / "other.yaml").write_text(spec_text("other", unit=unit))
    before = ledger_state(ledger_url)
    result = release(ws, ledger_url, "other.yaml", "--scope", "first", "--epsilon", "1/4")
    one_line_error(result, "'first'", "privacy unit", "column 'pid'", *words)
    assert ledger_state(ledger_url) == before
    data = pl.read_parquet(ws / "visits.parquet")
    with pytest.raises(PrivacyUnitMismatch):
        dp.release(data, ws / "other.yaml", ledger=ledger_url, scope="first", epsilon=0.25,
                   period="2024-01")  # fmt: skip
    assert ledger_state(ledger_url) == before


def test_a_parallel_scope_keeps_its_partition_into_periods(ws: Path, ledger_url: str) -> None:
    """Parallel composition gives each period the full cap because its people are disjoint;
    months cut by another date column are another partition, and a person would be in a
    January of one and a February of the other, each with the full cap."""
    (ws / "by_day.yaml").write_text(spec_text("by_day", composition="parallel"))
    (ws / "by_day2.yaml").write_text(spec_text("by_day2", period="day2", composition="parallel"))
    assert release(ws, ledger_url, "by_day.yaml", "--epsilon", "1/2", "--cap", "1").exit_code == 0
    before = ledger_state(ledger_url)
    result = release(ws, ledger_url, "by_day2.yaml", "--scope", "by_day", "--epsilon", "1/2")
    one_line_error(result, "'by_day'", "'day'", "'day2'", "period")
    assert ledger_state(ledger_url) == before
    with pytest.raises(CompositionMismatch):
        dp.release(pl.read_parquet(ws / "visits.parquet"), ws / "by_day2.yaml",
                   ledger=ledger_url, scope="by_day", epsilon=0.5, period="2024-01")  # fmt: skip


# -- a refused first release leaves no scope behind ---------------------------------------------


def _first_scope(ws: Path, url: str) -> None:
    """A ledger that exists, with one scope, so that `ledger status` can show what is absent."""
    assert release(ws, url, "first.yaml", "--epsilon", "1/4", "--cap", "1").exit_code == 0


def test_a_refused_rho_leaves_no_scope(ws: Path, ledger_url: str) -> None:
    _first_scope(ws, ledger_url)
    before = ledger_state(ledger_url)
    result = release(ws, ledger_url, "second.yaml", "--config", str(ws / "zcdp.yaml"),
                     "--scope", "z9", "--rho", "1e9")  # fmt: skip
    one_line_error(result, "z9", "ρ = 1000000000", "no scope was made", "--rho 0.003 or less")
    assert ledger_state(ledger_url) == before
    assert "z9" not in invoke_cli("ledger", "status", "--ledger", ledger_url).stdout


def test_a_rho_over_the_profile_leaves_no_scope(ws: Path, ledger_url: str) -> None:
    _first_scope(ws, ledger_url)
    before = ledger_state(ledger_url)
    result = release(ws, ledger_url, "second.yaml", "--config", str(ws / "zcdp.yaml"),
                     "--scope", "z8", "--rho", "1")  # fmt: skip
    one_line_error(result, "z8", "ρ = 1 is more than", "--rho 0.003 or less")
    assert ledger_state(ledger_url) == before
    # the scope a later release opens gets that release's cap, not the refused one's
    assert release(ws, ledger_url, "second.yaml", "--scope", "z8", "--rho", "1/1000",
                   "--config", str(ws / "zcdp.yaml"), "--cap", "0.002").exit_code == 0  # fmt: skip
    with dp.Ledger(ledger_url, mode="read") as ledger:
        assert str(ledger.status("z8")[0].cap) == "1/500"


def test_a_slot_of_another_scope_leaves_no_scope(ws: Path, ledger_url: str) -> None:
    _first_scope(ws, ledger_url)
    before = ledger_state(ledger_url)
    result = release(ws, ledger_url, "first.yaml", "--scope", "z7", "--epsilon", "1/4",
                     "--cap", "5")  # fmt: skip
    one_line_error(result, "belongs to scope 'first'")
    assert ledger_state(ledger_url) == before
    status = invoke_cli("ledger", "status", "--ledger", ledger_url)
    assert status.exit_code == 0 and "z7" not in status.stdout


def test_a_scope_made_after_the_budget_was_decided_still_refuses_other_terms(
    ws: Path, ledger_url: str
) -> None:
    """The ledger checks again in the transaction that would charge: a release whose budget was
    decided while its scope did not exist yet (a race with another run that then made it under
    substitute neighbours) is refused there, nothing charged."""
    from dprelease.publish import decide_budget, prepare, record_release
    from dprelease.spec import load_spec

    dp.Ledger(ledger_url).close()
    with dp.Ledger(ledger_url) as ledger:
        resolved = load_spec(ws / "second.yaml")
        budget = decide_budget(resolved, scope="first", ledger=ledger, epsilon=Fraction(1, 4),
                               cap=Fraction(1))  # fmt: skip
        assert budget.new_scope
        prepared = prepare(ws / "visits.parquet", resolved, budget, period="2024-01")
        opened = release(ws, ledger_url, "first.yaml", "--config", str(ws / "substitute.yaml"),
                         "--epsilon", "0.25")  # fmt: skip
        assert opened.exit_code == 0, opened.output
        before = ledger_state(ledger_url)
        with pytest.raises(NeighboursMismatch):
            record_release(prepared, ledger=ledger)
        assert ledger_state(ledger_url) == before
