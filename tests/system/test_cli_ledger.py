"""`dprelease ledger status|history|export|set-cap|void|upgrade`: tables readable at 80 columns,
--json, read-only commands that never create a ledger, and the exit-2 contract."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import FIXTURES
from typer.testing import CliRunner, Result

from dprelease.cli import app
from dprelease.ledger import Ledger, ScopeTerms

V1_FIXTURE = FIXTURES / "ledger_v1.sqlite"
LONG_ID = "hospital_visits_by_region_and_clinic_release/2024-02"


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
    ledger.reserve(LONG_ID, "visits", "2024-02", 0.125, spec_hash="h", run_id="run-8")
    ledger.reserve(
        "cases_release/2024-01",
        "cases",
        "2024-01",
        0.75,
        spec_hash="h",
        terms=ScopeTerms("parallel"),
    )
    return url


def run(*args: str, columns: int = 80) -> Result:
    return CliRunner(env={"COLUMNS": str(columns)}).invoke(app, ["ledger", *args])


def _cells(stdout: str, first: str) -> list[str]:
    row = next(line for line in stdout.splitlines() if line.split()[:1] == [first])
    return row.split()


def _assert_fits(stdout: str, width: int = 80) -> None:
    assert all(len(line) <= width for line in stdout.splitlines() if "sqlite:///" not in line)


def test_status_table_fits_80_columns(url: str) -> None:
    result = run("status", "--ledger", url)
    assert result.exit_code == 0, result.output
    _assert_fits(result.stdout)
    assert _cells(result.stdout, "visits") == [
        "visits",
        "ε",
        "0.5",
        "0.375",
        "0.125",
        "1",
        "1",
    ]
    assert _cells(result.stdout, "2024-01") == ["2024-01", "0.75", "0.25"]
    assert "dprelease ledger void RELEASE_ID" in " ".join(result.stdout.split())


def test_status_json_is_exact(url: str) -> None:
    result = run("status", "--ledger", url, "--scope", "visits", "--json")
    assert result.exit_code == 0, result.output
    (visits,) = json.loads(result.stdout)
    assert (visits["spent_exact"], visits["remaining_exact"], visits["cap"]) == ("3/8", "1/8", 0.5)
    assert visits["periods"]["2024-02"]["spent"] == 0.125


def _column(stdout: str, header: str) -> str:
    """The text of the table column under `header`, its folded lines joined."""
    lines = stdout.splitlines()
    start = next(line.index(header) for line in lines if header in line)
    return "".join(line[start:].strip() for line in lines)


@pytest.mark.parametrize("columns", [80, 60])
def test_history_table_fits_and_shows_release_ids_whole(url: str, columns: int) -> None:
    Ledger(url).void(LONG_ID, reason="worker was OOM-killed before commit; nothing published")
    result = run("history", "--ledger", url, columns=columns)
    assert result.exit_code == 0, result.output
    _assert_fits(result.stdout, columns)
    assert LONG_ID in _column(result.stdout, "release · details")  # folded, never cut
    assert "…" not in result.stdout
    text = " ".join(result.stdout.split())
    assert "scope visits" in text and "scope cases" in text
    assert "run run-7" in text and "committed" in text
    assert "reason: worker was OOM-killed before commit; nothing published" in text
    assert "voided" in text and "by " in text  # who voided it


def test_history_json(url: str) -> None:
    events = json.loads(run("history", "--ledger", url, "--json").stdout)
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


@pytest.mark.parametrize("command", ["status", "history", "export"])
def test_reading_a_missing_ledger_exits_2_and_creates_nothing(tmp_path: Path, command: str) -> None:
    missing = tmp_path / "typo" / "ledgr.sqlite"
    result = run(command, "--ledger", str(missing))
    assert result.exit_code == 2
    assert result.stderr.startswith("error: no ledger at") and len(result.stderr.splitlines()) == 1
    assert not missing.parent.exists()


@pytest.mark.parametrize("command", [["set-cap", "visits", "1"], ["void", "v/1", "--reason", "x"]])
def test_changing_a_missing_ledger_exits_2_and_creates_nothing(
    tmp_path: Path, command: list[str]
) -> None:
    missing = tmp_path / "ledgr.sqlite"
    result = run(*command, "--ledger", str(missing))
    assert result.exit_code == 2 and "no ledger at" in result.stderr
    assert not missing.exists()


def test_set_cap_is_exact_and_recorded(url: str) -> None:
    result = run("set-cap", "visits", "1/2", "--ledger", url)  # unchanged: no event
    assert result.exit_code == 0 and "remaining 0.125" in result.stdout
    result = run("set-cap", "visits", "0.75", "--reason", "board minute 12", "--ledger", url)
    assert result.exit_code == 0 and "remaining 0.375" in result.stdout
    changes = [e for e in Ledger(url).history("visits") if e.kind == "cap_changed"]
    assert len(changes) == 1 and "board minute 12" in (changes[0].detail or "")
    assert Ledger(url).status("visits")[0].cap == 0.75


def test_void_ends_an_open_reservation_and_refuses_a_committed_one(url: str) -> None:
    result = run("void", LONG_ID, "--reason", "run died", "--ledger", url)
    assert result.exit_code == 0, result.output
    assert f"voided the open reservation of {LONG_ID} (ε = 0.125 returned)" in result.stdout
    assert "scope visits has ε = 0.25 of its cap ε = 0.5 left" in result.stdout

    refused = run("void", "visits_release/2024-01", "--reason", "oops", "--ledger", url)
    assert refused.exit_code == 2 and "can never be voided" in refused.stderr
    assert len(refused.stderr.splitlines()) == 1
    missing_reason = run("void", LONG_ID, "--ledger", url)
    assert missing_reason.exit_code == 2 and "--reason" in missing_reason.output


def test_upgrade_migrates_an_old_ledger_then_reading_works(tmp_path: Path) -> None:
    old = tmp_path / "v1.sqlite"
    shutil.copyfile(V1_FIXTURE, old)
    refused = run("status", "--ledger", str(old))
    assert refused.exit_code == 2 and "dprelease ledger upgrade" in refused.stderr
    result = run("upgrade", "--ledger", str(old))
    assert result.exit_code == 0 and "schema version 1 -> 5" in result.stdout
    assert "up to date" in run("upgrade", "--ledger", str(old)).stdout
    status = run("status", "--ledger", str(old), "--json")
    assert [s["name"] for s in json.loads(status.stdout)] == ["cases", "visits"]


def test_ledger_from_environment(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DPRELEASE_LEDGER_URL", url)
    assert "visits" in run("status").stdout


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["status", "--scope", "nope"], "unknown budget scope 'nope'"),
        (["history", "--scope", "nope"], "unknown budget scope 'nope'"),
        (["set-cap", "visits", "0"], "CAP: the cap must be > 0"),
        (["set-cap", "visits", "abc"], "CAP: the cap must be a finite number > 0, got 'abc'"),
        (["set-cap", "nope", "1"], "unknown budget scope 'nope'"),
    ],
)
def test_bad_input_is_one_line_exit_2(url: str, args: list[str], words: str) -> None:
    result = run(*args, "--ledger", url)
    assert result.exit_code == 2
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith("error: ")
    assert words in result.stderr
    assert "Traceback" not in result.output


def test_corrupt_ledger_is_one_line_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    path.write_bytes(b"\x00garbage" * 500)
    result = run("history", "--ledger", str(path))
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ledger sqlite:///") and "corrupt" in result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_the_dprelease_entry_point_runs_the_ledger_commands(url: str) -> None:
    from importlib.metadata import entry_points

    (script,) = entry_points(group="console_scripts", name="dprelease")
    assert script.value == "dprelease.cli:main"
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
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert [s["name"] for s in json.loads(result.stdout)] == ["cases", "visits"]
