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

from dprelease.errors import (
    BudgetExhausted,
    CapAboveProfile,
    CompositionMismatch,
    LedgerError,
    LedgerUnavailable,
    ReservationMismatch,
    SpecChanged,
    UnknownScope,
)
from dprelease.ledger import (
    Ledger,
    ReleaseConflict,
    Reservation,
    ScopeTerms,
    exact_epsilon,
    make_release_id,
)


@pytest.fixture
def ledger(ledger_url: str) -> Ledger:
    return Ledger(ledger_url)


def _reserve(ledger: Ledger, rid: str, scope: str, period: str | None, eps: Any, **kw: Any):
    kw.setdefault("spec_hash", "h")
    kw.setdefault("run_id", "run-1")
    return ledger.reserve(rid, scope, period, eps, **kw)


def _release(ledger: Ledger, rid: str, scope: str, period: str | None, eps: Any, **kw: Any):
    """reserve -> build -> commit, as the publish path does; returns the published bytes."""
    reservation = _reserve(ledger, rid, scope, period, eps, **kw)
    if reservation.status == "committed":
        return ledger.stored_copy(reservation).table_parquet
    table = f"noisy table {rid} charge {reservation.charge_id}".encode()
    ledger.commit(reservation, table, {"release_id": rid})
    return table


def _state(ledger: Ledger) -> dict[str, Any]:
    dump = ledger.export()
    del dump["exported_at"]
    return dump


def _spent(ledger: Ledger, scope: str = "s") -> Fraction:
    return ledger.status(scope)[0].spent


def test_exhaustion_refuses_release_k_plus_1_and_writes_nothing(ledger: Ledger) -> None:
    ledger.ensure_scope("visits", 0.3)
    for month in ("2024-01", "2024-02", "2024-03"):
        _release(ledger, make_release_id("visits_release", month), "visits", month, 0.1)
    before = _state(ledger)

    with pytest.raises(BudgetExhausted) as info:
        _reserve(ledger, make_release_id("visits_release", "2024-04"), "visits", "2024-04", 0.1)

    exc = info.value
    assert (exc.scope, exc.spent, exc.cap, exc.requested, exc.remaining) == (
        "visits",
        pytest.approx(0.3),
        pytest.approx(0.3),
        pytest.approx(0.1),
        pytest.approx(0.0),
    )
    for words in ("spent ε = 0.3", "cap 0.3", "requested 0.1", "remaining 0"):
        assert words in str(exc)
    assert _state(ledger) == before
    assert _spent(ledger, "visits") == Fraction(3, 10)


def test_refusal_message_names_partial_remaining(ledger: Ledger) -> None:
    ledger.ensure_scope("s", 1)
    _release(ledger, "a", "s", None, 0.75)
    with pytest.raises(BudgetExhausted, match="remaining 0.25"):
        _reserve(ledger, "b", "s", None, 0.5)


def test_same_slot_twice_gives_identical_bytes_and_one_charge(ledger: Ledger) -> None:
    ledger.ensure_scope("s", 1)
    rid = make_release_id("visits_release", "2024-03")
    first = _release(ledger, rid, "s", "2024-03", 0.25)
    again = _reserve(ledger, rid, "s", "2024-03", 0.25, run_id="ui-rerun")
    second = _release(ledger, rid, "s", "2024-03", 0.25)

    assert (again.status, again.charged, again.epsilon_differs) == ("committed", False, False)
    assert again.committed_at is not None and again.spec_hash == "h"
    assert second == first
    status = ledger.status("s")[0]
    assert (status.spent, status.releases, status.open_reservations) == (Fraction(1, 4), 1, 0)
    kinds = [e.kind for e in ledger.history("s")]
    assert kinds == ["scope_created", "reserved", "committed", "reused", "reused"]


def test_rerun_of_a_released_slot_never_fails_or_charges_after_cap_and_eps_change(
    ledger: Ledger,
) -> None:
    """Issue 10: set-cap lower, then re-run the released months: stored copies, no charge."""
    ledger.ensure_scope("s", 1)
    for month in ("2024-01", "2024-02"):
        _release(ledger, f"v/{month}", "s", month, 0.5)  # the whole cap is spent
    ledger.set_cap("s", 0.5, reason="board lowered it")
    for month in ("2024-01", "2024-02"):
        again = _reserve(ledger, f"v/{month}", "s", month, 0.25)  # today's share of the new cap
        assert (again.status, again.epsilon, again.requested_epsilon) == (
            "committed",
            Fraction(1, 2),
            Fraction(1, 4),
        )
        assert again.epsilon_differs
    assert _spent(ledger) == 1
    reused = [e for e in ledger.history("s") if e.kind == "reused"]
    assert "this run asked for ε = 0.25" in (reused[-1].detail or "")


def test_changed_spec_for_a_released_slot_is_refused_unless_force_new(ledger: Ledger) -> None:
    ledger.ensure_scope("s", 1)
    _release(ledger, "v/2024-01", "s", "2024-01", 0.25, spec_hash="a" * 64)
    before = _state(ledger)
    with pytest.raises(SpecChanged, match="--force-new") as info:
        _reserve(ledger, "v/2024-01", "s", "2024-01", 0.25, spec_hash="b" * 64)
    assert "a" * 12 in str(info.value) and "b" * 12 in str(info.value)
    assert _state(ledger) == before

    anew = _reserve(ledger, "v/2024-01", "s", "2024-01", 0.25, spec_hash="b" * 64, force_new=True)
    assert (anew.status, anew.rerelease, anew.spec_hash) == ("reserved", True, "b" * 64)
    assert _spent(ledger) == Fraction(1, 2)


def test_force_new_is_charged_again_and_recorded_as_rerelease(ledger: Ledger) -> None:
    ledger.ensure_scope("s", 1)
    first = _release(ledger, "r", "s", None, 0.25)
    reservation = _reserve(ledger, "r", "s", None, 0.25, force_new=True)
    assert (reservation.status, reservation.rerelease) == ("reserved", True)
    ledger.commit(reservation, b"second draw", {})

    stored = ledger.stored_release("r")
    assert stored is not None and stored.table_parquet == b"second draw" != first
    assert _spent(ledger) == Fraction(1, 2)
    assert [e.kind for e in ledger.history("s")][-2:] == ["re-reserved", "committed"]
    assert [c["kind"] for c in ledger.export()["charges"]] == ["release", "re-release"]
    # a plain re-run now returns the re-release, not the first draw
    assert _release(ledger, "r", "s", None, 0.25) == b"second draw"


def test_open_reservation_is_resumed_without_second_charge(ledger: Ledger) -> None:
    ledger.ensure_scope("s", 0.5)
    crashed = _reserve(ledger, "r", "s", None, 0.5, run_id="crashed")
    resumed = _reserve(ledger, "r", "s", None, 0.5, run_id="retry", force_new=True)
    assert (resumed.status, resumed.charge_id, resumed.charged) == (
        "resumed",
        crashed.charge_id,
        False,
    )
    ledger.commit(resumed, b"t", {})
    assert _spent(ledger) == Fraction(1, 2)
    assert [e.run_id for e in ledger.history("s")][1:] == ["crashed", "retry", "retry"]


@pytest.mark.parametrize(
    ("change", "words"), [({"epsilon": 0.25}, "ε = 0.25"), ({"spec_hash": "other"}, "spec other")]
)
def test_open_reservation_for_another_spec_or_eps_is_refused_until_voided(
    ledger: Ledger, change: dict[str, Any], words: str
) -> None:
    ledger.ensure_scope("s", 1)
    _reserve(ledger, "v/2024-01", "s", "2024-01", 0.5, run_id="crashed")
    asked = {"epsilon": 0.5, "spec_hash": "h"} | change
    eps = asked.pop("epsilon")
    before = _state(ledger)
    with pytest.raises(ReservationMismatch) as info:
        _reserve(ledger, "v/2024-01", "s", "2024-01", eps, **asked)
    message = str(info.value)
    assert words in message and "dprelease ledger void v/2024-01 --reason" in message
    assert _state(ledger) == before

    ledger.void("v/2024-01", reason="run crashed; nothing published")
    fresh = _reserve(ledger, "v/2024-01", "s", "2024-01", eps, **asked)
    assert fresh.status == "reserved"
    assert _spent(ledger) == exact_epsilon(eps)


def test_void_frees_the_budget_and_records_who_and_why(ledger: Ledger) -> None:
    ledger.ensure_scope("s", Fraction(1, 2))
    open_ = _reserve(ledger, "v/2024-01", "s", "2024-01", Fraction(1, 2), run_id="dead-run")
    with pytest.raises(BudgetExhausted):
        _reserve(ledger, "v/2024-02", "s", "2024-02", Fraction(1, 2))

    voided = ledger.void("v/2024-01", reason="worker OOM-killed, nothing published")
    assert (voided.charge_ids, voided.epsilon, voided.scope) == (
        (open_.charge_id,),
        Fraction(1, 2),
        "s",
    )
    status = ledger.status("s")[0]
    assert (status.spent, status.open_reservations, status.releases) == (0, 0, 0)
    event = ledger.history("s")[-1]
    assert (event.kind, event.status, event.run_id) == ("voided", "voided", "dead-run")
    assert "worker OOM-killed" in (event.detail or "") and "pid" in event.actor
    assert ledger.export()["charges"][0]["status"] == "voided"
    assert _reserve(ledger, "v/2024-02", "s", "2024-02", Fraction(1, 2)).status == "reserved"


def test_a_committed_release_can_never_be_voided(ledger: Ledger) -> None:
    ledger.ensure_scope("s", 1)
    _release(ledger, "v/2024-01", "s", "2024-01", 0.5)
    before = _state(ledger)
    with pytest.raises(LedgerError, match="can never be voided"):
        ledger.void("v/2024-01", reason="oops")
    with pytest.raises(LedgerError, match="no open reservation"):
        ledger.void("never/released", reason="typo")
    with pytest.raises(LedgerError, match="needs a reason"):
        ledger.void("v/2024-01", reason="  ")
    assert _state(ledger) == before


def test_a_voided_reservation_cannot_be_committed(ledger: Ledger) -> None:
    ledger.ensure_scope("s", 1)
    slow = _reserve(ledger, "r", "s", None, 0.5)
    ledger.void("r", reason="looked dead")
    with pytest.raises(LedgerError, match="was voided"):
        ledger.commit(slow, b"late table", {})
    assert ledger.stored_release("r") is None and _spent(ledger) == 0


def test_second_commit_of_one_reservation_conflicts_and_keeps_the_first(ledger: Ledger) -> None:
    ledger.ensure_scope("s", 1)
    a = _reserve(ledger, "r", "s", None, 0.5)
    b = _reserve(ledger, "r", "s", None, 0.5)
    assert b.status == "resumed"
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
        ledger.commit(_reserve(ledger, "r", "s", None, 0.5), b"x", {})


def test_a_slot_belongs_to_one_scope_and_period(ledger: Ledger) -> None:
    ledger.ensure_scope("s", 1)
    ledger.ensure_scope("t", 1)
    _release(ledger, "r", "s", None, 0.5)
    with pytest.raises(LedgerError, match="belongs to scope 's'"):
        _reserve(ledger, "r", "t", None, 0.5)


def test_stored_release_roundtrips_bytes_manifest_and_epsilon(ledger: Ledger) -> None:
    ledger.ensure_scope("s", 1)
    table = bytes(range(256)) * 10
    manifest = {"epsilon": 0.5, "columns": ["a", "b"], "nested": {"k": [1, 2]}}
    reservation = _reserve(ledger, "r", "s", None, "1/2", spec_hash="abc")
    ledger.commit(reservation, table, manifest)
    stored = ledger.stored_release("r")
    assert stored is not None
    assert (stored.table_parquet, stored.manifest, stored.charge_id) == (
        table,
        manifest,
        reservation.charge_id,
    )
    assert (stored.epsilon, stored.spec_hash) == (Fraction(1, 2), "abc")
    assert stored.committed_at.tzinfo is not None
    assert "table_parquet" not in repr(stored)  # reprs stay short in logs
    assert ledger.stored_release("never") is None
    with pytest.raises(LedgerError, match="not stored yet"):
        ledger.stored_copy(_reserve(ledger, "other", "s", None, "1/4"))


def test_input_fingerprint_is_compared_and_never_leaves_the_ledger(ledger: Ledger) -> None:
    ledger.ensure_scope("s", 1)
    secret = "engine-1:7f3a9c-private"
    ledger.commit(_reserve(ledger, "r", "s", None, 0.5), b"t", {}, input_fingerprint=secret)
    ledger.commit(_reserve(ledger, "q", "s", None, 0.25), b"t", {})  # fingerprint unknown

    again = _reserve(ledger, "r", "s", None, 0.5)
    assert again.status == "committed" and secret not in repr(again)
    assert ledger.input_changed(again, secret) is False
    assert ledger.input_changed(again, "engine-1:other") is True
    assert ledger.input_changed(again, "engine-2:7f3a9c-private") is None  # another scheme
    assert ledger.input_changed(_reserve(ledger, "q", "s", None, 0.25), secret) is None
    assert _spent(ledger) == Fraction(3, 4)  # the fingerprint never decides a charge
    dump = ledger.export(include_tables=True)
    published = json.dumps(dump) + repr(ledger.history()) + repr(ledger.stored_release("r"))
    assert "7f3a9c" not in published
    assert all("input_fingerprint" not in charge for charge in dump["charges"])


def test_parallel_scope_gives_each_period_the_full_cap(ledger: Ledger) -> None:
    ledger.ensure_scope("par", 0.5, "parallel")
    ledger.ensure_scope("seq", 0.5, "sequential")
    for period in ("2024-01", "2024-02"):
        _release(ledger, f"p/{period}", "par", period, 0.5, terms=ScopeTerms("parallel"))
    _release(ledger, "s/2024-01", "seq", "2024-01", 0.5)

    with pytest.raises(BudgetExhausted, match="period 2024-01"):
        _reserve(ledger, "p2/2024-01", "par", "2024-01", 0.1, terms=ScopeTerms("parallel"))
    with pytest.raises(BudgetExhausted):
        _reserve(ledger, "s/2024-02", "seq", "2024-02", 0.1)
    with pytest.raises(LedgerError, match="pass the period"):
        _reserve(ledger, "p/-", "par", None, 0.1, terms=ScopeTerms("parallel"))
    par = ledger.status("par")[0]
    assert par.periods == {"2024-01": Fraction(1, 2), "2024-02": Fraction(1, 2)}
    assert (par.spent, par.remaining) == (Fraction(1, 2), 0)


def test_spec_composition_must_equal_the_scopes(ledger: Ledger) -> None:
    """Issue 9 item 2: a sequential spec may not draw on a parallel scope, nor the reverse."""
    ledger.ensure_scope("par", 1, "parallel")
    ledger.ensure_scope("seq", 1, "sequential")
    before = _state(ledger)
    with pytest.raises(CompositionMismatch, match="'parallel' but the spec says 'sequential'"):
        _reserve(ledger, "x/2024-01", "par", "2024-01", 0.5, terms=ScopeTerms("sequential"))
    with pytest.raises(CompositionMismatch):
        _reserve(ledger, "x/2024-01", "seq", "2024-01", 0.5, terms=ScopeTerms("parallel"))
    with pytest.raises(CompositionMismatch):
        ledger.ensure_scope("seq", 1, "parallel")
    assert _state(ledger) == before


def test_ensure_scope_keeps_the_ledgers_cap(ledger: Ledger) -> None:
    """The ledger's cap is the source of truth: a different cap neither fails nor applies."""
    created = ledger.ensure_scope("s", 0.3466)
    assert created.cap == Fraction(1733, 5000)
    assert ledger.ensure_scope("s", 0.5).cap == Fraction(1733, 5000)
    assert [e.kind for e in ledger.history("s")] == ["scope_created"]


def test_cap_above_the_profile_refuses_new_charges_but_not_reruns(ledger: Ledger) -> None:
    ledger.ensure_scope("s", 1)
    _release(ledger, "v/2024-01", "s", "2024-01", 0.25)
    profile = Fraction(1, 2)
    rerun = _reserve(ledger, "v/2024-01", "s", "2024-01", 0.25, max_cap=profile)
    assert rerun.status == "committed"
    before = _state(ledger)
    with pytest.raises(CapAboveProfile, match="set-cap s 0.5 ") as info:
        _reserve(ledger, "v/2024-02", "s", "2024-02", 0.25, max_cap=profile)
    assert "nothing was spent" in str(info.value)
    assert _state(ledger) == before
    ledger.set_cap("s", profile, reason="match the profile")
    assert _reserve(ledger, "v/2024-02", "s", "2024-02", 0.25, max_cap=profile).charged


def test_set_cap_is_deliberate_and_recorded(ledger: Ledger) -> None:
    ledger.ensure_scope("s", 0.1)
    _release(ledger, "a", "s", None, 0.1)
    ledger.set_cap("s", 0.2, reason="ethics board 2024-05")
    _release(ledger, "b", "s", None, 0.1)
    last = [e for e in ledger.history("s") if e.kind == "cap_changed"]
    assert len(last) == 1 and "ethics board 2024-05" in (last[0].detail or "")
    assert _spent(ledger) == Fraction(1, 5)


def test_unknown_scope_is_its_own_error_not_an_outage(ledger: Ledger) -> None:
    with pytest.raises(UnknownScope, match="create it first") as info:
        _reserve(ledger, "r", "nope", None, 0.1)
    assert not isinstance(info.value, LedgerUnavailable)
    with pytest.raises(UnknownScope, match="unknown budget scope"):
        ledger.status("nope")
    with pytest.raises(UnknownScope):
        ledger.set_cap("nope", 1)


def test_reserve_needs_a_spec_hash(ledger: Ledger) -> None:
    ledger.ensure_scope("s", 1)
    with pytest.raises(LedgerError, match="spec hash"):
        _reserve(ledger, "r", "s", None, 0.1, spec_hash="")


@pytest.mark.parametrize("bad", [0, -0.1, math.nan, math.inf, "x", True])
def test_epsilon_must_be_positive_and_finite(bad: Any) -> None:
    with pytest.raises(LedgerError, match="epsilon"):
        exact_epsilon(bad)


def test_export_is_json_and_tables_are_opt_in(ledger: Ledger) -> None:
    ledger.ensure_scope("s", 1)
    _release(ledger, "r", "s", "p", 0.5)
    dump = json.loads(json.dumps(ledger.export()))
    assert dump["format"] == "dprelease-ledger-export/3"
    assert [r["release_id"] for r in dump["releases"]] == ["r"]
    assert dump["charges"][0]["spec_hash"] == "h"
    assert "table_parquet_base64" not in dump["releases"][0]
    assert len(dump["releases"][0]["table_sha256"]) == 64
    assert dump["scopes"][0]["spent_exact"] == "1/2"
    assert ledger.export(include_tables=True)["releases"][0]["table_parquet_base64"]


def test_release_ids_are_slots() -> None:
    assert make_release_id("visits_release", "2024-03") == "visits_release/2024-03"
    assert make_release_id("cases", None) == "cases/-"
    for asset, period in [("", None), ("a/b", None), (" a", None), ("a", "x/y"), ("a", "-")]:
        with pytest.raises(LedgerError, match="release id"):
            make_release_id(asset, period)


# ---- exact accounting ----------------------------------------------------------------------


def _fill(ledger: Ledger, cap: Any, charge: Any, attempts: int) -> int:
    ledger.ensure_scope("s", cap)
    for i in range(attempts):
        try:
            _reserve(ledger, f"r{i}", "s", None, charge)
        except BudgetExhausted:
            return i
    return attempts


@pytest.mark.parametrize(
    "cap",
    [0.3466, 1 / 3, Fraction(1, 3), 0.5 * math.log(2), 1e-6],
    ids=["0.3466", "float 1/3", "Fraction 1/3", "eps_min", "1e-6"],
)
def test_thousand_small_charges_never_exceed_the_cap(cap: Any) -> None:
    ledger = Ledger("sqlite://")  # in memory: the accounting is the point, not durability
    admitted = _fill(ledger, cap, cap / 1000, 1001)
    status = ledger.status("s")[0]
    assert status.spent <= status.cap == exact_epsilon(cap)
    assert status.spent == admitted * exact_epsilon(cap / 1000)
    assert admitted in (999, 1000)  # at most the last one is lost to float division of the cap
    if isinstance(cap, Fraction):
        assert (admitted, status.remaining) == (1000, 0)


def test_a_release_at_exactly_the_cap_fits(ledger: Ledger) -> None:
    eps_min = 0.5 * math.log(2)
    ledger.ensure_scope("s", eps_min)
    assert _reserve(ledger, "r", "s", None, eps_min).status == "reserved"


def test_floats_count_as_the_decimals_they_print_as(ledger: Ledger) -> None:
    ledger.ensure_scope("s", 0.3)  # in binary 0.1 + 0.1 + 0.1 > 0.3; in decimal it fits
    for i in range(3):
        _reserve(ledger, f"r{i}", "s", None, 0.1)
    assert ledger.status("s")[0].remaining == 0


@settings(max_examples=40, deadline=None)
@given(
    cap=st.floats(min_value=1e-4, max_value=20, allow_nan=False),
    n=st.integers(min_value=1, max_value=60),
)
def test_n_charges_of_cap_over_n_never_overspend(cap: float, n: int) -> None:
    ledger = Ledger("sqlite://")  # in memory: fast, same SQL
    admitted = _fill(ledger, cap, cap / n, n + 1)
    status = ledger.status("s")[0]
    assert status.spent <= status.cap
    assert admitted in (n - 1, n)


@settings(max_examples=30, deadline=None)
@given(steps=st.lists(st.sampled_from(["reserve", "commit", "void"]), min_size=1, max_size=12))
def test_status_and_reserve_agree_on_what_is_spent(steps: list[str]) -> None:
    """ "Spent" has one definition: whatever mix of open, committed and voided charges, status
    reports exactly what reserve admits against (Σ reserved + committed, voided excluded)."""
    ledger = Ledger("sqlite://")
    ledger.ensure_scope("s", 1)
    open_: list[Reservation] = []
    counted = Fraction(0)
    for i, step in enumerate(steps):
        if step == "reserve":
            open_.append(_reserve(ledger, f"r{i}", "s", None, Fraction(1, 16)))
            counted += Fraction(1, 16)
        elif open_ and step == "commit":
            ledger.commit(open_.pop(), b"t", {})
        elif open_:
            ledger.void(open_.pop().release_id, reason="test")
            counted -= Fraction(1, 16)
    assert ledger.status("s")[0].spent == counted
    fits = 1 - counted
    assert _reserve(ledger, "last", "s", None, fits).charged  # exactly the rest fits
    with pytest.raises(BudgetExhausted):
        _reserve(ledger, "over", "s", None, Fraction(1, 10**9))


# ---- failing closed ------------------------------------------------------------------------


def _assert_clean(exc: LedgerError) -> None:
    message = str(exc)
    assert isinstance(exc, LedgerUnavailable)
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
        _reserve(ledger, "r", "s", None, 0.1)
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
