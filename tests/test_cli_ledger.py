"""`dprelease ledger status|history|export|set-cap`: tables, --json, and the exit-2 contract."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from dprelease.cli.ledger import ledger_app
from dprelease.ledger import Ledger


@pytest.fixture
def url(tmp_path: Path) -> str:
    """A sequential scope (one release, one crashed reservation) and a parallel one."""
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    ledger = Ledger(url)
    ledger.ensure_scope("visits", 0.5)
    ledger.ensure_scope("cases", 1, "parallel")
    done = ledger.reserve(
        "visits_release/2024-01", "visits", "2024-01", 0.25, spec_hash="h", run_id="run-7"
    )
    ledger.commit(done, b"PAR1 table", {"epsilon_total": 0.25})
    ledger.reserve(
        "visits_release/2024-02", "visits", "2024-02", 0.125, spec_hash="h", run_id="run-8"
    )
    ledger.reserve(
        "cases_release/2024-01", "cases", "2024-01", 0.75, spec_hash="h", composition="parallel"
    )
    return url


def run(*args: str) -> Result:
    return CliRunner(env={"COLUMNS": "200"}).invoke(ledger_app, list(args))


def test_status_table(url: str) -> None:
    result = run("status", "--ledger", url)
    assert result.exit_code == 0, result.output
    row = next(line for line in result.stdout.splitlines() if "visits" in line)
    cells = [c.strip() for c in row.split("│")[1:-1]]
    assert cells == ["visits", "sequential", "0.5", "0.375", "0.125", "1", "1"]
    period = next(line for line in result.stdout.splitlines() if "2024-01" in line)
    assert [c.strip() for c in period.split("│")[1:-1]] == ["2024-01", "0.75", "0.25"]


def test_status_json_is_exact(url: str) -> None:
    result = run("status", "--ledger", url, "--scope", "visits", "--json")
    assert result.exit_code == 0, result.output
    (visits,) = json.loads(result.stdout)
    assert (visits["spent_exact"], visits["remaining_exact"], visits["cap"]) == ("3/8", "1/8", 0.5)
    assert visits["periods"]["2024-02"]["spent"] == 0.125


def test_history_table_and_json(url: str) -> None:
    table = run("history", "--ledger", url, "--scope", "visits")
    assert table.exit_code == 0, table.output
    assert "run-7" in table.stdout and "committed" in table.stdout
    result = run("history", "--ledger", url, "--json")
    events = json.loads(result.stdout)
    assert [(e["kind"], e["scope"]) for e in events] == [
        ("scope_created", "visits"),
        ("scope_created", "cases"),
        ("reserved", "visits"),
        ("committed", "visits"),
        ("reserved", "visits"),
        ("reserved", "cases"),
    ]
    assert events[2]["run_id"] == "run-7" and events[2]["epsilon_exact"] == "1/4"


def test_export_json_to_stdout_and_file(url: str, tmp_path: Path) -> None:
    dump = json.loads(run("export", "--ledger", url, "--json").stdout)
    assert [c["status"] for c in dump["charges"]] == ["committed", "reserved", "reserved"]
    assert dump["releases"][0]["manifest"] == {"epsilon_total": 0.25}
    assert "table_parquet_base64" not in dump["releases"][0]

    out = tmp_path / "export.json"
    result = run("export", "--ledger", url, "--scope", "cases", "--tables", "-o", str(out))
    assert result.exit_code == 0, result.output
    assert [c["scope"] for c in json.loads(out.read_text())["charges"]] == ["cases"]


def test_set_cap_is_recorded(url: str) -> None:
    result = run("set-cap", "visits", "1/2", "--ledger", url)  # unchanged: no event
    assert result.exit_code == 0 and "remaining 0.125" in result.stdout
    result = run("set-cap", "visits", "0.75", "--reason", "board minute 12", "--ledger", url)
    assert result.exit_code == 0 and "remaining 0.375" in result.stdout
    changes = [e for e in Ledger(url).history("visits") if e.kind == "cap_changed"]
    assert len(changes) == 1 and "board minute 12" in (changes[0].detail or "")


def test_ledger_from_environment(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DPRELEASE_LEDGER_URL", url)
    assert "visits" in run("status").stdout


@pytest.mark.parametrize("args", [["status", "--scope", "nope"], ["set-cap", "visits", "0"]])
def test_bad_input_is_one_line_exit_2(url: str, args: list[str]) -> None:
    result = run(*args, "--ledger", url)
    assert result.exit_code == 2
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith("error: ")
    assert "Traceback" not in result.output


def test_corrupt_ledger_is_one_line_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    path.write_bytes(b"\x00garbage" * 500)
    result = run("history", "--ledger", str(path))
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ledger sqlite:///") and "corrupt" in result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_registered_on_the_dprelease_command(url: str) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "from dprelease.cli import main; main()",
            "ledger",
            "status",
            "--json",
            "--ledger",
            url,
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert [s["name"] for s in json.loads(result.stdout)] == ["cases", "visits"]
