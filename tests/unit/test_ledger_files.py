"""The SQLite ledger file: created readable by its owner only (it holds input fingerprints,
with which a reader can test guesses of the whole input: PRIVACY.md), journal files included;
an existing ledger that others can read is reported on the operator channel, once per open."""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dprelease.cli import app
from dprelease.errors import LedgerError
from dprelease.ledger import Ledger
from dprelease.operator import LOGGER_NAME


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(autouse=True)
def loose_umask() -> Iterator[None]:
    """The usual umask (022), under which SQLite's own files are readable by everyone."""
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER_NAME]


def test_a_new_ledger_file_is_private(tmp_path: Path) -> None:
    path = tmp_path / ".dprelease" / "ledger.sqlite"
    with Ledger(str(path)) as ledger:
        ledger.ensure_scope("s", 1)
        assert ledger.created
    assert mode(path) == 0o600


def test_a_new_ledger_made_by_a_release_is_private(tmp_path: Path) -> None:
    (tmp_path / "spec.yaml").write_text(
        "release: {name: v, source: v, privacy_unit: pid, max_rows_per_unit: 1, "
        "statistics: [{name: n, kind: count}]}\n"
    )
    (tmp_path / "v.csv").write_text("pid\n1\n2\n")
    path = tmp_path / "ledger.sqlite"
    result = CliRunner().invoke(
        app,
        [
            "release",
            "--spec",
            str(tmp_path / "spec.yaml"),
            "--data",
            str(tmp_path / "v.csv"),
            "--out",
            str(tmp_path / "out"),
            "--ledger",
            str(path),
            "--epsilon",
            "1",
            "--cap",
            "1",
        ],
    )
    assert result.exit_code == 0, result.output
    assert mode(path) == 0o600
    assert "readable" not in result.stderr


@pytest.mark.parametrize("journal_mode", ["delete", "wal"])
def test_sqlite_journal_files_take_the_ledger_files_permissions(
    tmp_path: Path, journal_mode: str
) -> None:
    path = tmp_path / "ledger.sqlite"
    Ledger(str(path)).close()
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        connection.execute(f"PRAGMA journal_mode={journal_mode}")
        connection.execute("BEGIN IMMEDIATE")
        connection.execute("CREATE TABLE probe (x)")
        companions = [p for p in tmp_path.iterdir() if p != path]
        assert companions  # -journal, or -wal and -shm
        assert {p.name: mode(p) for p in companions} == {p.name: 0o600 for p in companions}
        connection.execute("ROLLBACK")
    finally:
        connection.close()


def test_a_ledger_readable_by_others_is_reported_once_per_open(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "my ledger.sqlite"
    Ledger(str(path)).close()
    path.chmod(0o644)
    with caplog.at_level(logging.WARNING, logger=LOGGER_NAME):
        for open_mode in ("create", "existing", "read"):
            caplog.clear()
            Ledger(str(path), mode=open_mode).close()  # type: ignore[arg-type]
            (warning,) = warnings(caplog)
            assert f"ledger file {path} is readable by its group and others (mode 0644)" in warning
            assert "input fingerprint" in warning
            assert warning.endswith(f"chmod 600 '{path}'")
        path.chmod(0o604)
        caplog.clear()
        Ledger(str(path), mode="read").close()
        assert "readable by others (mode 0604)" in warnings(caplog)[0]
        path.chmod(0o600)
        caplog.clear()
        Ledger(str(path), mode="read").close()
        assert warnings(caplog) == []


def test_the_cli_shows_the_warning_once_on_stderr(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    Ledger(str(path)).close()
    path.chmod(0o640)
    result = CliRunner().invoke(app, ["ledger", "status", "--ledger", str(path)])
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("warning: ledger file")
    assert "readable by its group (mode 0640)" in lines[0] and "chmod 600" in lines[0]
    assert mode(path) == 0o640  # reported, not changed: its owner decides


def test_a_ledger_that_cannot_be_opened_leaves_no_file(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    with pytest.raises(LedgerError, match="ledger URL"):
        Ledger(f"sqlite+nodriver:///{path}")
    assert not path.exists()
