"""The ledger's accounting and protocol, on SQLite and on a real PostgreSQL."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pgtest import BACKENDS, backend_url
from sqlalchemy import create_engine, insert, select, text

from dprelease.errors import BudgetExhausted, LedgerError, ReleaseConflict
from dprelease.ledger import (
    MIGRATIONS,
    Ledger,
    exact_epsilon,
    make_release_id,
    resolve_ledger_url,
    schema_version,
)

ledger_url = pytest.fixture(params=BACKENDS)(backend_url)


@pytest.fixture
def ledger(ledger_url: str) -> Ledger:
    return Ledger(ledger_url)


def _release(ledger: Ledger, rid: str, scope: str, period: str | None, eps: Any) -> bytes:
    """reserve -> build -> commit, as the publish path does; returns the published bytes."""
    reservation = ledger.reserve(rid, scope, period, eps, run_id="run-1")
    if reservation.status == "committed":
        stored = ledger.stored_release(rid)
        assert stored is not None
        return stored.table_parquet
    table = f"noisy table {rid} charge {reservation.charge_id}".encode()
    ledger.commit(reservation, table, {"release_id": rid})
    return table


def _state(ledger: Ledger) -> dict[str, Any]:
    dump = ledger.export()
    del dump["exported_at"]
    return dump


def test_exhaustion_refuses_release_k_plus_1_and_writes_nothing(ledger: Ledger) -> None:
    ledger.ensure_scope("visits", 0.3)
    for month in ("2024-01", "2024-02", "2024-03"):
        _release(ledger, make_release_id("visits_release", month, "h"), "visits", month, 0.1)
    before = _state(ledger)

    with pytest.raises(BudgetExhausted) as info:
        ledger.reserve(make_release_id("visits_release", "2024-04", "h"), "visits", "2024-04", 0.1)

    exc = info.value
    assert (exc.scope, exc.spent, exc.cap, exc.requested, exc.remaining) == (
        "visits",
        pytest.approx(0.3),
        pytest.approx(0.3),
        pytest.approx(0.1),
        pytest.approx(0.0),
    )
    for words in ("spent 0.3", "cap 0.3", "requested 0.1", "remaining 0"):
        assert words in str(exc)
    assert _state(ledger) == before
    assert ledger.status("visits")[0].spent == Fraction(3, 10)


def test_refusal_message_names_partial_remaining(ledger: Ledger) -> None:
    ledger.ensure_scope("s", 1)
    _release(ledger, "a", "s", None, 0.75)
    with pytest.raises(BudgetExhausted, match="remaining 0.25"):
        ledger.reserve("b", "s", None, 0.5)


def test_same_release_id_twice_gives_identical_bytes_and_one_charge(ledger: Ledger) -> None:
    ledger.ensure_scope("s", 1)
    rid = make_release_id("visits_release", "2024-03", "ab12cd34")
    first = _release(ledger, rid, "s", "2024-03", 0.25)
    again = ledger.reserve(rid, "s", "2024-03", 0.25, run_id="ui-rerun")
    second = _release(ledger, rid, "s", "2024-03", 0.25)

    assert again.status == "committed"
    assert second == first
    status = ledger.status("s")[0]
    assert (status.spent, status.releases, status.open_reservations) == (Fraction(1, 4), 1, 0)
    kinds = [e.kind for e in ledger.history("s")]
    assert kinds == ["scope_created", "reserved", "committed", "reused", "reused"]


def test_force_new_is_charged_again_and_recorded_as_rerelease(ledger: Ledger) -> None:
    ledger.ensure_scope("s", 1)
    first = _release(ledger, "r", "s", None, 0.25)
    reservation = ledger.reserve("r", "s", None, 0.25, force_new=True)
    assert (reservation.status, reservation.rerelease) == ("reserved", True)
    ledger.commit(reservation, b"second draw", {})

    stored = ledger.stored_release("r")
    assert stored is not None and stored.table_parquet == b"second draw" != first
    assert ledger.status("s")[0].spent == Fraction(1, 2)
    assert [e.kind for e in ledger.history("s")][-2:] == ["re-reserved", "committed"]
    assert [c["kind"] for c in ledger.export()["charges"]] == ["release", "re-release"]


def test_uncommitted_reservation_is_resumed_without_second_charge(ledger: Ledger) -> None:
    ledger.ensure_scope("s", 0.5)
    crashed = ledger.reserve("r", "s", None, 0.5, run_id="crashed")
    resumed = ledger.reserve("r", "s", None, 0.5, run_id="retry", force_new=True)
    assert (resumed.status, resumed.charge_id) == ("resumed", crashed.charge_id)
    ledger.commit(resumed, b"t", {})
    assert ledger.status("s")[0].spent == Fraction(1, 2)
    assert [e.run_id for e in ledger.history("s")][1:] == ["crashed", "retry", "retry"]


def test_second_commit_of_one_reservation_conflicts_and_keeps_the_first(ledger: Ledger) -> None:
    ledger.ensure_scope("s", 1)
    a = ledger.reserve("r", "s", None, 0.5)
    b = ledger.reserve("r", "s", None, 0.5)
    ledger.commit(a, b"first", {})
    with pytest.raises(ReleaseConflict) as info:
        ledger.commit(b, b"second", {})
    assert info.value.stored.table_parquet == b"first"
    stored = ledger.stored_release("r")
    assert stored is not None and stored.table_parquet == b"first"


def test_committing_a_committed_reservation_is_refused(ledger: Ledger) -> None:
    ledger.ensure_scope("s", 1)
    _release(ledger, "r", "s", None, 0.5)
    with pytest.raises(LedgerError, match="stored_release"):
        ledger.commit(ledger.reserve("r", "s", None, 0.5), b"x", {})


def test_changed_release_under_same_id_is_refused(ledger: Ledger) -> None:
    ledger.ensure_scope("s", 1)
    _release(ledger, "r", "s", None, 0.5)
    with pytest.raises(LedgerError, match="new release id"):
        ledger.reserve("r", "s", None, 0.25)


def test_stored_release_roundtrips_bytes_and_manifest(ledger: Ledger) -> None:
    ledger.ensure_scope("s", 1)
    table = bytes(range(256)) * 10
    manifest = {"epsilon": 0.5, "columns": ["a", "b"], "nested": {"k": [1, 2]}}
    reservation = ledger.reserve("r", "s", None, 0.5)
    ledger.commit(reservation, table, manifest)
    stored = ledger.stored_release("r")
    assert stored is not None
    assert (stored.table_parquet, stored.manifest, stored.charge_id) == (
        table,
        manifest,
        reservation.charge_id,
    )
    assert stored.committed_at.tzinfo is not None
    assert ledger.stored_release("never") is None


def test_parallel_scope_gives_each_period_the_full_cap(ledger: Ledger) -> None:
    ledger.ensure_scope("par", 0.5, "parallel")
    ledger.ensure_scope("seq", 0.5, "sequential")
    for period in ("2024-01", "2024-02"):
        _release(ledger, f"p/{period}", "par", period, 0.5)
    _release(ledger, "s/2024-01", "seq", "2024-01", 0.5)

    with pytest.raises(BudgetExhausted, match="period 2024-01"):
        ledger.reserve("p/2024-01/v2", "par", "2024-01", 0.1)
    with pytest.raises(BudgetExhausted):
        ledger.reserve("s/2024-02", "seq", "2024-02", 0.1)
    with pytest.raises(LedgerError, match="pass the period"):
        ledger.reserve("p/none", "par", None, 0.1)
    par = ledger.status("par")[0]
    assert par.periods == {"2024-01": Fraction(1, 2), "2024-02": Fraction(1, 2)}
    assert (par.spent, par.remaining) == (Fraction(1, 2), 0)


def test_ensure_scope_is_idempotent_and_refuses_silent_changes(ledger: Ledger) -> None:
    ledger.ensure_scope("s", 0.3466)
    ledger.ensure_scope("s", Fraction(1733, 5000))  # the same number
    with pytest.raises(LedgerError, match="set-cap"):
        ledger.ensure_scope("s", 0.5)
    with pytest.raises(LedgerError, match="new scope name"):
        ledger.ensure_scope("s", 0.3466, "parallel")
    assert ledger.status("s")[0].cap == Fraction(1733, 5000)


def test_set_cap_is_deliberate_and_recorded(ledger: Ledger) -> None:
    ledger.ensure_scope("s", 0.1)
    _release(ledger, "a", "s", None, 0.1)
    ledger.set_cap("s", 0.2, reason="ethics board 2024-05")
    _release(ledger, "b", "s", None, 0.1)
    last = [e for e in ledger.history("s") if e.kind == "cap_changed"]
    assert len(last) == 1 and "ethics board 2024-05" in (last[0].detail or "")
    assert ledger.status("s")[0].spent == Fraction(1, 5)


def test_unknown_scope_is_a_clear_error(ledger: Ledger) -> None:
    with pytest.raises(LedgerError, match="ensure_scope"):
        ledger.reserve("r", "nope", None, 0.1)
    with pytest.raises(LedgerError, match="unknown budget scope"):
        ledger.status("nope")


@pytest.mark.parametrize("bad", [0, -0.1, math.nan, math.inf, "x", True])
def test_epsilon_must_be_positive_and_finite(bad: Any) -> None:
    with pytest.raises(LedgerError, match="epsilon"):
        exact_epsilon(bad)


def test_export_is_json_and_tables_are_opt_in(ledger: Ledger) -> None:
    ledger.ensure_scope("s", 1)
    _release(ledger, "r", "s", "p", 0.5)
    dump = json.loads(json.dumps(ledger.export()))
    assert [r["release_id"] for r in dump["releases"]] == ["r"]
    assert "table_parquet_base64" not in dump["releases"][0]
    assert len(dump["releases"][0]["table_sha256"]) == 64
    assert dump["scopes"][0]["spent_exact"] == "1/2"
    assert ledger.export(include_tables=True)["releases"][0]["table_parquet_base64"]


# ---- exact accounting ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "cap",
    [0.3466, 1 / 3, Fraction(1, 3), 0.5 * math.log(2), 1e-6],
    ids=["0.3466", "float 1/3", "Fraction 1/3", "eps_min", "1e-6"],
)
@pytest.mark.slow
def test_thousand_small_charges_never_exceed_the_cap(cap: Any) -> None:
    ledger = Ledger("sqlite://")  # in memory: the accounting is the point, not durability
    ledger.ensure_scope("s", cap)
    charge = cap / 1000
    admitted = 0
    for i in range(1001):
        try:
            ledger.reserve(f"r{i}", "s", None, charge)
            admitted += 1
        except BudgetExhausted:
            break
    status = ledger.status("s")[0]
    assert status.spent <= status.cap == exact_epsilon(cap)
    assert status.spent == admitted * exact_epsilon(charge)
    assert admitted in (999, 1000)  # at most the last one is lost to float division of the cap
    if isinstance(cap, Fraction):
        assert (admitted, status.remaining) == (1000, 0)


def test_a_release_at_exactly_the_cap_fits(ledger: Ledger) -> None:
    eps_min = 0.5 * math.log(2)
    ledger.ensure_scope("s", eps_min)
    assert ledger.reserve("r", "s", None, eps_min).status == "reserved"


def test_floats_count_as_the_decimals_they_print_as(ledger: Ledger) -> None:
    ledger.ensure_scope("s", 0.3)  # in binary 0.1 + 0.1 + 0.1 > 0.3; in decimal it fits
    for i in range(3):
        ledger.reserve(f"r{i}", "s", None, 0.1)
    assert ledger.status("s")[0].remaining == 0


@settings(max_examples=40, deadline=None)
@given(
    cap=st.floats(min_value=1e-4, max_value=20, allow_nan=False),
    n=st.integers(min_value=1, max_value=60),
)
def test_n_charges_of_cap_over_n_never_overspend(cap: float, n: int) -> None:
    ledger = Ledger("sqlite://")  # in memory: fast, same SQL
    ledger.ensure_scope("s", cap)
    admitted = 0
    for i in range(n + 1):
        try:
            ledger.reserve(f"r{i}", "s", None, cap / n)
            admitted += 1
        except BudgetExhausted:
            break
    status = ledger.status("s")[0]
    assert status.spent <= status.cap
    assert admitted in (n - 1, n)


# ---- failing closed ------------------------------------------------------------------------


def _assert_clean(exc: LedgerError) -> None:
    message = str(exc)
    assert "nothing was charged" in message
    assert "sqlalche.me" not in message and "Traceback" not in message
    assert exc.__suppress_context__  # raised `from None`: no chained driver traceback


def test_garbage_sqlite_file_fails_closed(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    path.write_bytes(b"this is not a database, just garbage bytes " * 200)
    with pytest.raises(LedgerError, match="unreachable or corrupt") as info:
        Ledger(str(path))
    _assert_clean(info.value)
    assert "file is not a database" in str(info.value)


def test_ledger_corrupted_after_open_fails_closed(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    ledger = Ledger(str(path))
    ledger.ensure_scope("s", 1)
    ledger.close()
    data = bytearray(path.read_bytes())
    data[:100] = b"\xff" * 100  # clobber the header
    path.write_bytes(bytes(data))
    with pytest.raises(LedgerError) as info:
        ledger.reserve("r", "s", None, 0.1)
    _assert_clean(info.value)


def test_unreachable_server_fails_closed() -> None:
    with pytest.raises(LedgerError, match="unreachable or corrupt") as info:
        Ledger("postgresql+psycopg://u:secret@127.0.0.1:1/nodb")
    _assert_clean(info.value)
    assert "secret" not in str(info.value)


@pytest.mark.parametrize("url", ["mysql://u@h/db", "not a url://", "sqlite+nodriver:///x"])
def test_unusable_url_is_a_ledger_error(url: str) -> None:
    with pytest.raises(LedgerError, match="ledger URL"):
        Ledger(url)


# ---- schema --------------------------------------------------------------------------------


def test_schema_is_created_once_and_reopening_is_idempotent(ledger_url: str) -> None:
    for _ in range(3):
        assert Ledger(ledger_url).schema_version == len(MIGRATIONS)
    with create_engine(ledger_url).connect() as conn:
        versions = conn.execute(select(schema_version.c.version)).scalars().all()
    assert versions == list(range(1, len(MIGRATIONS) + 1))


def test_newer_schema_is_refused(ledger_url: str) -> None:
    Ledger(ledger_url)
    engine = create_engine(ledger_url)
    with engine.begin() as conn:
        conn.execute(
            insert(schema_version).values(version=len(MIGRATIONS) + 1, applied_at=text("now()"))
            if engine.dialect.name == "postgresql"
            else text("INSERT INTO dprelease_schema_version VALUES (99, '2030-01-01')")
        )
    with pytest.raises(LedgerError, match="upgrade dprelease"):
        Ledger(ledger_url)


# ---- configuration -------------------------------------------------------------------------


def test_resolve_ledger_url_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DPRELEASE_LEDGER_URL", raising=False)
    default = tmp_path / "deep" / "dir" / "ledger.sqlite"
    assert resolve_ledger_url(None, default) == f"sqlite:///{default}"
    assert default.parent.is_dir()
    monkeypatch.setenv("DPRELEASE_LEDGER_URL", "postgresql+psycopg://h/env")
    assert resolve_ledger_url(None, default) == "postgresql+psycopg://h/env"
    assert resolve_ledger_url("sqlite:///x.db", default) == "sqlite:///x.db"
    assert resolve_ledger_url(str(tmp_path / "p.sqlite")) == f"sqlite:///{tmp_path / 'p.sqlite'}"
    nested = tmp_path / "new" / "dir" / "l.sqlite"  # an explicit path's directories are made
    assert Ledger(str(nested)).created and not Ledger(str(nested)).created


def test_release_ids_are_deterministic() -> None:
    assert make_release_id("visits_release", "2024-03", "ab12") == "visits_release/2024-03/ab12"
    assert make_release_id("cases", None, "ab12") == "cases/-/ab12"
    with pytest.raises(LedgerError, match="spec_hash"):
        make_release_id("cases", None, "")
