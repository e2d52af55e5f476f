"""ρ is called ρ: every face of a zCDP scope (what `dprelease release` prints, its refusals and
errors, `ledger status/history/export/void/set-cap`, the Python API's words) names the measure,
with the (ε, δ) a cap or a charge implies; and every amount is spelled one way, exactly
(`amount_text`), on SQLite and PostgreSQL alike, unwrapped when the output is not a terminal.

Outsiders read `lifetime cap ε = 0.123` (a ρ that means (3.3, 10⁻⁹)-DP), `release with
--epsilon 0.013 or less` for a scope that refuses --epsilon, `--rho: ε must be > 0`, `(ε 0.002
returned)`, `requested 0.00833333` beside `1/120 ≈ 0.00833`, and `0.333333` for a cap of 1/3."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest
from helpers import invoke_cli, one_line_error, words, write_visits

import dprelease as dp
from dprelease.cli._common import in_cli_words
from dprelease.errors import BudgetExhausted
from dprelease.loss import Measure

SPEC = """\
release:
  name: visits
  source: visits
  privacy_unit: pid
  max_rows_per_unit: 2
  period: {column: day}
  group_by:
    - column: region
      domain: {values: [n, s]}
  statistics:
    - {name: n, kind: count}
"""
ZCDP = """\
privacy:
  profile: {kind: constant, bound: 3000}
  measure: zcdp
  delta: 1.0e-9
  rounding: 0.001
"""
#: An ε where only a ρ may be: `ε = 0.1` or `ε 0.1`, but not the ε of an (ε, δ) pair.
EPSILON_AMOUNT = re.compile(r"ε =? ?[0-9]")


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    (tmp_path / "spec.yaml").write_text(SPEC)
    (tmp_path / "privacy.yaml").write_text(ZCDP)
    write_visits(tmp_path, [f"2024-{m:02d}-03" for m in range(1, 5)], pid=[1, 2, 3, 4],
                 region=["n", "s", "s", "n"])  # fmt: skip
    return tmp_path


def release(ws: Path, ledger: str, month: str, *extra: str):  # noqa: ANN201
    return invoke_cli(
        "release", "--spec", str(ws / "spec.yaml"), "--data", str(ws / "visits.parquet"),
        "--out", str(ws / "pub" / month), "--period", month, "--ledger", ledger,
        "--config", str(ws / "privacy.yaml"), *extra,
    )  # fmt: skip


def no_epsilon_amount(text: str) -> None:
    assert EPSILON_AMOUNT.search(text) is None, text


def test_a_zcdp_release_says_rho_with_the_epsilon_delta_it_implies(
    ws: Path, ledger_url: str
) -> None:
    first = release(ws, ledger_url, "2024-01", "--rho", "1/120")
    assert first.exit_code == 0, first.output
    err, out = words(first.stderr), words(first.stdout)
    assert (
        "new budget scope 'visits': lifetime cap ρ = 0.163, i.e. (3.84, 1e-09)-DP (sequential, "
        "add_remove neighbours, privacy unit column 'pid')"
    ) in err
    assert "this release: ρ = 1/120 ≈ 0.00833, i.e. (0.839, 1e-09)-DP;" in out
    assert "scope 'visits' has ρ = 58/375 ≈ 0.155 of its cap ρ = 0.163 left" in out
    no_epsilon_amount(err + out)

    refused = release(ws, ledger_url, "2024-02", "--rho", "1/6")
    line = one_line_error(refused, "spent ρ = 1/120 ≈ 0.00833", "requested 1/6 ≈ 0.167")
    assert "--rho 58/375 or less" in line and "--epsilon" not in line
    assert "0.00833333" not in line  # one spelling of an amount per message
    no_epsilon_amount(line)
    one_line_error(release(ws, ledger_url, "2024-02", "--rho", "0"), "--rho: ρ must be > 0")


def test_the_ledger_commands_say_rho(ws: Path, ledger_url: str) -> None:
    assert release(ws, ledger_url, "2024-01", "--rho", "1/120").exit_code == 0
    with dp.Ledger(ledger_url) as ledger:  # an open reservation, as a killed run leaves one
        from dprelease.ledger import ScopeTerms
        from dprelease.loss import Measure

        ledger.reserve("visits/2024-02", "visits", "2024-02", "1/500", spec_hash="h",
                       terms=ScopeTerms(measure=Measure.ZCDP, delta=1e-9))  # fmt: skip
    status = invoke_cli("ledger", "status", "--ledger", ledger_url)
    assert status.exit_code == 0
    assert "cap ρ = 0.163, i.e. (3.84, 1e-09)-DP" in words(status.stdout)
    history = words(invoke_cli("ledger", "history", "--ledger", ledger_url).stdout)
    assert "ρ = 1/120 ≈ 0.00833" in history and "cap ρ = 0.163" in history
    no_epsilon_amount(history)
    void = invoke_cli("ledger", "void", "visits/2024-02", "--reason", "killed", "--ledger",
                      ledger_url)  # fmt: skip
    assert "(ρ = 0.002 returned)" in void.stdout and "its cap ρ = 0.163 left" in void.stdout
    no_epsilon_amount(void.stdout)
    capped = invoke_cli("ledger", "set-cap", "visits", "1/3", "--reason", "r", "--ledger",
                        ledger_url)  # fmt: skip
    assert "cap ρ = 1/3 ≈ 0.333, i.e. (" in capped.stdout
    dump = json.loads(invoke_cli("ledger", "export", "--ledger", ledger_url).stdout)
    assert {c["unit"] for c in dump["charges"]} == {"ρ"}
    assert {e["unit"] for e in dump["events"]} == {"ρ"}
    assert dump["format"] == "dprelease-ledger-export/3"
    above = release(ws, ledger_url, "2024-03", "--rho", "1/1000")
    one_line_error(above, "cap ρ = 1/3 ≈ 0.333 in the ledger", "allows (ρ = 0.163)")


def test_the_api_says_rho_for_a_stored_copy_asked_at_another_rho(ws: Path, ledger_url: str) -> None:
    dp.Ledger(ledger_url).close()
    data = ws / "visits.parquet"
    args = dict(privacy=ws / "privacy.yaml", ledger=ledger_url, period="2024-01")
    dp.release(data, ws / "spec.yaml", rho="1/120", **args)
    again = dp.release(data, ws / "spec.yaml", rho="1/100", **args)
    assert "stored with ρ = 1/120 ≈ 0.00833; this run asked for ρ = 0.01" in again.status


def test_status_into_a_file_is_unwrapped_and_exact_on_both_backends(
    ws: Path, ledger_url: str, tmp_path: Path
) -> None:
    long_scope = "hospital_admissions_by_ward_and_week_of_stay_" + "x" * 40
    assert (
        release(ws, ledger_url, "2024-01", "--rho", "1/120", "--scope", long_scope).exit_code == 0
    )
    with dp.Ledger(ledger_url) as ledger:
        ledger.set_cap(long_scope, "1/3", reason="a third")
    env = {key: value for key, value in __import__("os").environ.items() if key != "COLUMNS"}
    with (tmp_path / "status.txt").open("w") as file:
        done = subprocess.run(
            [sys.executable, "-c", "from dprelease.cli import main; main()", "ledger", "status",
             "--ledger", ledger_url],
            stdout=file, stderr=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "status.txt").read_text()
    row = next(line for line in text.splitlines() if long_scope in line)  # never folded
    assert "1/3 ≈ 0.333" in row and "0.333333" not in text
    listed = json.loads(invoke_cli("ledger", "status", "--ledger", ledger_url, "--json").stdout)
    assert listed[0]["cap_exact"] == "1/3"


def test_the_python_reprs_name_the_measure(ws: Path, ledger_url: str) -> None:
    """`print(result)` and `print(status)` in a notebook: the amounts with their measure, not a
    bare 0.0083 a reader would take for an ε (nor the whole table and manifest)."""
    dp.Ledger(ledger_url).close()
    result = dp.release(ws / "visits.parquet", ws / "spec.yaml", privacy=ws / "privacy.yaml",
                        ledger=ledger_url, period="2024-01", rho="1/120")  # fmt: skip
    assert repr(result) == (
        "ReleaseResult(visits/2024-01: released and charged; ρ = 1/120 ≈ 0.00833; "
        "2 rows × 3 columns)"
    )
    with dp.Ledger(ledger_url, mode="read") as ledger:
        assert repr(ledger.status("visits")[0]) == (
            "ScopeStatus('visits': cap ρ = 0.163, i.e. (3.84, 1e-09)-DP, spent ρ = 1/120 ≈ "
            "0.00833, left ρ = 58/375 ≈ 0.155; sequential, add_remove neighbours, privacy unit "
            "column 'pid')"
        )


@pytest.mark.parametrize(
    ("remaining", "typed"),
    [
        (Fraction("0.123988628768") - Fraction("0.01"), "0.113988628768"),  # was 3562144649/…
        (Fraction(1, 3), "1/3"),
        (Fraction(58, 375), "58/375"),
        (Fraction(1, 7) - Fraction(1, 10**6), "999993/7000000 (≈ 0.143)"),
    ],
)
def test_a_refusal_says_the_remainder_as_one_types_it(remaining: Fraction, typed: str) -> None:
    """The refusal's advice is exact (the whole remainder can be spent) and readable: a scope
    capped at ρ = 0.123988628768 with 0.01 spent was told `--rho 3562144649/31250000000`."""
    refused = BudgetExhausted(
        "zc", Fraction("0.01"), Fraction("0.01") + remaining, Fraction(5), measure=Measure.ZCDP
    )
    assert f"release with --rho {typed} or less, or raise" in in_cli_words(refused)
