"""reserve → release → commit → write: exactly-once files, no overspend, crash safety."""

from __future__ import annotations

import json
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from fractions import Fraction
from pathlib import Path

import polars as pl
import pytest

from dprelease.errors import (
    BudgetExhausted,
    CompositionMismatch,
    SpecChanged,
    UnsafeNoiseSourceError,
)
from dprelease.files import atomic_path
from dprelease.ledger import Ledger
from dprelease.mechanism.noise import NoiseSource
from dprelease.publish import (
    RELEASE_FILES,
    PreparedRelease,
    Recorded,
    decide_budget,
    prepare,
    publish,
    record_release,
)
from dprelease.spec import load_spec


def _prepare(
    ws: Path, ledger: Ledger, period: str, epsilon: float = 0.25, spec: str = "spec.yaml"
) -> PreparedRelease:
    """The workspace's release of `period` at `epsilon`, against the ledger's scope "visits"."""
    resolved = load_spec(ws / spec)
    budget = decide_budget(resolved, scope="visits", ledger=ledger, epsilon=Fraction(str(epsilon)))
    return prepare(ws / "visits.parquet", resolved, budget, period=period)


def _publish(
    ws: Path, ledger: Ledger, period: str, epsilon: float = 0.25, spec: str = "spec.yaml", **kwargs
) -> Recorded:
    prepared = _prepare(ws, ledger, period, epsilon, spec)
    return publish(prepared, ledger=ledger, asset="visits", out_dir=ws / "out" / period, **kwargs)


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
    assert (first.describe(), second.charged) == ("released and charged", False)
    assert second.describe().startswith("already released on ")
    assert second.describe().endswith(": stored copy returned, nothing charged")
    assert before == after
    assert ledger.status("visits")[0].spent == Fraction(1, 4)
    assert json.loads(after["manifest.json"])["release_id"] == first.release_id


def test_force_new_is_charged_again_and_recorded(workspace: Path) -> None:
    ledger = Ledger(str(workspace / "ledger.sqlite"))
    ledger.ensure_scope("visits", 1)
    _publish(workspace, ledger, "2024-01")
    again = _publish(workspace, ledger, "2024-01", force_new=True)
    assert again.status == "reserved" and again.stored.manifest["ledger"]["rerelease"] is True
    assert ledger.status("visits")[0].spent == Fraction(1, 2)


def test_exhausted_budget_refuses_changes_nothing_and_writes_nothing(workspace: Path) -> None:
    ledger = Ledger(str(workspace / "ledger.sqlite"))
    ledger.ensure_scope("visits", Fraction(1, 2))  # exactly two releases at ε = 1/4
    _publish(workspace, ledger, "2024-01")
    _publish(workspace, ledger, "2024-02")
    before = _snapshot(ledger)
    with pytest.raises(BudgetExhausted) as info:
        _publish(workspace, ledger, "2024-03")
    assert "spent ε = 0.5 of cap 0.5, requested 0.25, remaining 0" in str(info.value)
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
        from fractions import Fraction
        from pathlib import Path
        from dprelease.ledger import Ledger
        from dprelease.publish import PreparedRelease, decide_budget, prepare, publish
        from dprelease.spec import load_spec

        def die(self, *args, **kwargs):  # the process dies after reserve, before commit
            os.kill(os.getpid(), signal.SIGKILL)

        PreparedRelease.draw = die
        ws = Path({str(workspace)!r})
        ledger = Ledger({str(ledger_path)!r})
        resolved = load_spec(ws / "spec.yaml")
        budget = decide_budget(resolved, scope="visits", ledger=ledger, epsilon=Fraction(1, 4))
        prepared = prepare(ws / "visits.parquet", resolved, budget, period="2024-01")
        publish(prepared, ledger=ledger, asset="visits", out_dir=ws / "out" / "2024-01")
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


def test_rerun_after_the_cap_changed_returns_the_stored_copy_and_says_so(workspace: Path) -> None:
    ledger = Ledger(str(workspace / "ledger.sqlite"))
    ledger.ensure_scope("visits", Fraction(1, 4))
    first = _publish(workspace, ledger, "2024-01", epsilon=0.25)
    ledger.set_cap("visits", 0.5, reason="board")
    again = _publish(workspace, ledger, "2024-01", epsilon=0.5)  # today's ε: the cap changed
    assert (again.status, again.stored.epsilon, again.requested_epsilon) == (
        "committed",
        Fraction(1, 4),
        Fraction(1, 2),
    )
    assert again.epsilon_differs and "stored with ε = 0.25; this run asked for ε = 0.5" in (
        again.describe()
    )
    assert again.stored.table_parquet == first.stored.table_parquet
    assert ledger.status("visits")[0].spent == Fraction(1, 4)


def test_a_changed_spec_for_a_released_period_is_refused(workspace: Path) -> None:
    ledger = Ledger(str(workspace / "ledger.sqlite"))
    ledger.ensure_scope("visits", 1)
    _publish(workspace, ledger, "2024-01")
    published = (workspace / "out/2024-01/release.csv").read_bytes()
    wider = (workspace / "spec.yaml").read_text().replace("upper: 10", "upper: 20")
    (workspace / "wider.yaml").write_text(wider)
    with pytest.raises(SpecChanged, match="--force-new"):
        _publish(workspace, ledger, "2024-01", spec="wider.yaml")
    assert (workspace / "out/2024-01/release.csv").read_bytes() == published
    anew = _publish(workspace, ledger, "2024-01", spec="wider.yaml", force_new=True)
    assert anew.charged and anew.stored.manifest["ledger"]["rerelease"] is True


def test_a_sequential_spec_cannot_draw_on_a_parallel_scope(workspace: Path) -> None:
    ledger = Ledger(str(workspace / "ledger.sqlite"))
    ledger.ensure_scope("visits", 1, "parallel")
    with pytest.raises(CompositionMismatch):
        _publish(workspace, ledger, "2024-01")
    assert ledger.status("visits")[0].spent == 0 and not (workspace / "out").exists()


def test_changed_input_returns_the_stored_release_with_an_operator_warning(
    workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The engine fingerprints the period's rows; the ledger keeps it privately and a re-run on
    different data returns the stored release, warning only the operator."""
    ledger = Ledger(str(workspace / "ledger.sqlite"))
    ledger.ensure_scope("visits", 1)
    with caplog.at_level(logging.WARNING, logger="dprelease.operator"):
        first = _publish(workspace, ledger, "2024-01")
        data = pl.read_parquet(workspace / "visits.parquet")
        data.reverse().write_parquet(workspace / "visits.parquet")  # same rows, other order
        same = _publish(workspace, ledger, "2024-01")
        assert not caplog.records
        data.with_columns(pl.col("cost") * 2).write_parquet(workspace / "visits.parquet")
        changed = _publish(workspace, ledger, "2024-01")
    assert (first.input_warning(), same.input_warning()) == (None, None)
    warning = changed.input_warning()
    assert warning is not None and "input differs" in warning and "--force-new" in warning
    assert [r.getMessage() for r in caplog.records] == [warning]
    assert changed.stored.table_parquet == first.stored.table_parquet
    assert ledger.status("visits")[0].spent == Fraction(1, 4)
    with sqlite3.connect(workspace / "ledger.sqlite") as db:  # kept in the ledger, privately
        (kept,) = db.execute("SELECT input_fingerprint FROM dprelease_charges").fetchone()
    assert kept.startswith("polars-")
    published = b"".join(p.read_bytes() for p in (workspace / "out/2024-01").iterdir())
    assert kept.encode() not in published and kept not in json.dumps(ledger.export())


def test_a_run_that_loses_the_commit_race_returns_the_winners_release(workspace: Path) -> None:
    """Two runs resumed one reservation; the other committed first: ours publishes theirs."""
    ledger = Ledger(str(workspace / "ledger.sqlite"))
    ledger.ensure_scope("visits", 1)
    prepared = _prepare(workspace, ledger, "2024-01")
    crashed = ledger.reserve(
        "visits/2024-01", "visits", "2024-01", 0.25, spec_hash=prepared.resolved.hash
    )

    def other_run_commits_first(stage: str) -> None:
        if stage == "recording in the ledger":
            other = ledger.reserve(
                "visits/2024-01", "visits", "2024-01", 0.25, spec_hash=prepared.resolved.hash
            )
            ledger.commit(other, b"the other run's table", {"by": "other"})

    recorded = record_release(
        prepared, ledger=ledger, asset="visits", on_stage=other_run_commits_first
    )
    assert isinstance(recorded, Recorded) and recorded.status == "resumed"
    assert recorded.stored.charge_id == crashed.charge_id
    assert (recorded.stored.table_parquet, recorded.stored.manifest) == (
        b"the other run's table",
        {"by": "other"},
    )
    assert ledger.status("visits")[0].spent == Fraction(1, 4)


def test_a_failing_file_write_leaves_no_temp_file_and_the_old_files(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = Ledger(str(workspace / "ledger.sqlite"))
    ledger.ensure_scope("visits", 1)
    _publish(workspace, ledger, "2024-01")
    out = workspace / "out/2024-01"
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def disk_full(_stored: object) -> bytes:
        raise OSError(28, "No space left on device")

    monkeypatch.setitem(RELEASE_FILES, "release.csv", disk_full)
    with pytest.raises(OSError, match="No space"):
        _publish(workspace, ledger, "2024-01")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_atomic_path_replaces_whole_or_not_at_all(tmp_path: Path) -> None:
    target = tmp_path / "new" / "data.bin"
    with atomic_path(target) as temporary:
        assert temporary.parent == target.parent and temporary != target
        temporary.write_bytes(b"first")
    assert target.read_bytes() == b"first"
    with pytest.raises(RuntimeError), atomic_path(target) as temporary:
        temporary.write_bytes(b"half")
        raise RuntimeError("writer crashed")
    assert target.read_bytes() == b"first"
    assert os.listdir(target.parent) == ["data.bin"]
    assert oct(target.stat().st_mode & 0o777) == oct(0o666 & ~_umask())


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current
