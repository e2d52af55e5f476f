"""A release of randomized answers that its reports refuse (malformed, or made under another
wave's configuration) leaves the ledger as it found it, through every face: no charge row, no
open reservation for the next run to take over, no file. Its reports are read only once a
release is drawn, so the release is drawn before it is reserved (publish/_record.py); before,
the refusal came after `ledger.reserve` and left an open reservation of ε 0 that the next good
run reported as "took over an open reservation of this release made by another run"."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest
from helpers import invoke_cli
from test_local_release import reports, spec, write_spec
from typer.testing import Result

import dprelease as dp
from dprelease.local import MalformedReports, ReportsOfAnotherConfiguration

SLOT = "drug_use_by_region/-"


def malformed() -> pl.DataFrame:
    """One report that no k-RR randomizer of the wave gives (an answer outside its domain)."""
    return reports().with_columns(
        pl.when(pl.int_range(pl.len()) == 3).then(pl.lit("sometimes")).otherwise("drug_use")
        .alias("drug_use")
    )  # fmt: skip


def sealed_by(wave: dict[str, object]) -> pl.DataFrame:
    """One report whose page carried another configuration's seal (`wave_hash`)."""
    other = dp.local.load(spec(wave)).wave.hash
    return reports().with_columns(
        pl.when(pl.int_range(pl.len()) == 5).then(pl.lit(other)).otherwise("wave_hash")
        .alias("wave_hash")
    )  # fmt: skip


REFUSED = [
    pytest.param(malformed, MalformedReports, "'drug_use'", id="malformed"),
    pytest.param(
        lambda: sealed_by({"id": "drug-use-2024-11"}),  # an earlier wave's reports
        ReportsOfAnotherConfiguration,
        "'wave_hash'",
        id="stale-wave",
    ),
    pytest.param(
        lambda: sealed_by({"epsilon": "1/2"}),  # a stale snippet at another ε
        ReportsOfAnotherConfiguration,
        "'wave_hash'",
        id="stale-configuration",
    ),
]


def slot_charges(book: dp.Ledger) -> list[tuple[str, str]]:
    """The ledger's charge rows of the release's slot: (kind, status)."""
    return [(c["kind"], c["status"]) for c in book.export()["charges"] if c["release_id"] == SLOT]


@pytest.mark.parametrize(("bad", "error", "column"), REFUSED)
def test_dp_release_refused_by_its_reports_leaves_no_reservation(
    tmp_path: Path, bad: Callable[[], pl.DataFrame], error: type[Exception], column: str
) -> None:
    book = dp.Ledger(str(tmp_path / "ledger.sqlite"))
    dp.local.record_wave(spec(), ledger=book, cap=2)
    with pytest.raises(error) as refused:
        dp.release(bad(), spec(), ledger=book)
    assert column in str(refused.value) and "\n" not in str(refused.value)
    status = book.status("respondents")[0]
    assert (status.open_reservations, status.releases, status.spent) == (0, 1, 1)  # the wave's
    assert slot_charges(book) == [] and book.stored_release(SLOT) is None
    assert not [e for e in book.history() if e.release_id == SLOT]
    good = dp.release(reports(), spec(), ledger=book)
    assert good.status.startswith(f"{SLOT}: released and recorded, charged nothing")
    assert slot_charges(book) == [("release", "committed")]
    assert [e.kind for e in book.history() if e.release_id == SLOT] == ["reserved", "committed"]


@pytest.mark.parametrize(("bad", "error", "column"), REFUSED)
def test_the_command_line_refused_by_its_reports_leaves_no_reservation_and_no_file(
    tmp_path: Path, bad: Callable[[], pl.DataFrame], error: type[Exception], column: str
) -> None:
    path = write_spec(tmp_path, spec())
    ledger = str(tmp_path / "ledger.sqlite")
    with dp.Ledger(ledger) as book:
        dp.local.record_wave(spec(), ledger=book, cap=2)
    bad().write_parquet(tmp_path / "bad.parquet")
    reports().write_parquet(tmp_path / "good.parquet")

    def release(data: str) -> Result:
        return invoke_cli(
            "release", "--spec", str(path), "--data", str(tmp_path / data),
            "--out", str(tmp_path / "pub"), "--ledger", ledger,
        )  # fmt: skip

    refused = release("bad.parquet")
    assert refused.exit_code == 2, refused.output
    # one `error:` line; the count is a `warning:` line of the operator channel
    lines = refused.stderr.splitlines()
    [error_line] = [line for line in lines if not line.startswith("warning: ")]
    assert error_line.startswith("error: ") and column in error_line
    assert "nothing was released" in error_line and "Traceback" not in refused.output
    assert not (tmp_path / "pub").exists()
    status = invoke_cli("ledger", "status", "--ledger", ledger, "--json")
    [scope] = json.loads(status.stdout)
    assert (scope["open_reservations"], scope["releases"], scope["spent_exact"]) == (0, 1, "1")
    with dp.Ledger(ledger, mode="read") as book:
        assert slot_charges(book) == []
    good = release("good.parquet")
    assert good.exit_code == 0, good.output
    said = " ".join(good.stdout.split())
    assert "charged nothing" in said and "took over" not in said
    assert (tmp_path / "pub" / "manifest.json").exists()


def test_a_new_release_of_a_released_slot_refused_by_its_reports_leaves_no_reservation(
    tmp_path: Path,
) -> None:
    """--force-new (force_new=True) asks for a new release of a released slot: its reports are
    read, and their refusal adds no charge to the slot's."""
    book = dp.Ledger(str(tmp_path / "ledger.sqlite"))
    dp.local.record_wave(spec(), ledger=book, cap=2)
    dp.release(reports(), spec(), ledger=book)
    with pytest.raises(MalformedReports):
        dp.release(malformed(), spec(), ledger=book, force_new=True)
    assert slot_charges(book) == [("release", "committed")]
    assert book.status("respondents")[0].open_reservations == 0


def test_a_rerun_of_a_released_slot_returns_it_whatever_its_reports(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """As for any release, re-running a released slot never fails on its input: the stored
    copy, charged nothing, and a warning on the operator channel that the input changed."""
    book = dp.Ledger(str(tmp_path / "ledger.sqlite"))
    dp.local.record_wave(spec(), ledger=book, cap=2)
    first = dp.release(reports(), spec(), ledger=book)
    with caplog.at_level(logging.WARNING, logger="dprelease.operator"):
        again = dp.release(malformed(), spec(), ledger=book)
    assert again.table.equals(first.table) and "already released" in again.status
    assert "the input differs from the one released" in caplog.text
    assert slot_charges(book) == [("release", "committed")]
