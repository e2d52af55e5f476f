"""Real processes racing on one ledger (SQLite file and PostgreSQL): no overspend, no double
charge, and a run killed between reserve and commit is resumed without a second charge."""

from __future__ import annotations

import signal
from collections import Counter
from fractions import Fraction

import ledger_workers as workers
import pytest
from helpers import RACERS
from sqlalchemy import create_engine, func, select

from dprelease.ledger import MIGRATIONS, Ledger, make_release_id
from dprelease.ledger.schema import charges, schema_version
from dprelease.loss import Measure

pytestmark = pytest.mark.races
TIMEOUT_S = 120


def _run_all(target: object, arg_lists: list[tuple[object, ...]]) -> list[int]:
    procs = [RACERS.Process(target=target, args=args) for args in arg_lists]
    for p in procs:
        p.start()
    for p in procs:
        p.join(TIMEOUT_S)
    assert all(p.exitcode is not None for p in procs), "a worker hung"
    return [p.exitcode for p in procs]  # type: ignore[misc]


def _charge_count(url: str) -> int:
    with create_engine(url).connect() as conn:
        return conn.execute(select(func.count()).select_from(charges)).scalar_one()


def test_sixteen_racers_for_five_budgets_exactly_five_release(ledger_url: str) -> None:
    eps = Fraction(1, 10)
    Ledger(ledger_url).ensure_scope("visits", 5 * eps)  # admits exactly 5 releases
    barrier = RACERS.Barrier(16)
    periods = [f"2024-{m:02d}" for m in range(1, 17)]
    codes = _run_all(
        workers.release_once,
        [
            (ledger_url, "visits", make_release_id("visits_release", p), p, eps, barrier)
            for p in periods
        ],
    )

    assert Counter(codes) == {workers.RELEASED: 5, workers.EXHAUSTED: 11}
    ledger = Ledger(ledger_url)
    status = ledger.status("visits")[0]
    assert status.spent == Fraction(1, 2) <= status.cap
    assert (status.releases, status.open_reservations) == (5, 0)
    released = [p for p, code in zip(periods, codes, strict=True) if code == workers.RELEASED]
    for p in released:
        assert ledger.stored_release(make_release_id("visits_release", p)) is not None


def test_sixteen_racers_in_rho_never_overspend_a_zcdp_scope(ledger_url: str) -> None:
    """The same race in a zCDP scope: charges add exactly in ρ (ρ = 1/30 each, cap 1/10)."""
    rho = Fraction(1, 30)
    Ledger(ledger_url).ensure_scope("survey", 3 * rho, measure=Measure.ZCDP, delta=1e-9)
    barrier = RACERS.Barrier(16)
    periods = [f"2024-{m:02d}" for m in range(1, 17)]
    codes = _run_all(
        workers.release_once,
        [
            (ledger_url, "survey", make_release_id("survey", p), p, rho, barrier, Measure.ZCDP)
            for p in periods
        ],
    )
    assert Counter(codes) == {workers.RELEASED: 3, workers.EXHAUSTED: 13}
    status = Ledger(ledger_url).status("survey")[0]
    assert (status.unit, status.spent, status.releases) == ("ρ", Fraction(1, 10), 3)


def test_racers_on_one_slot_charge_once_and_publish_one_table(ledger_url: str) -> None:
    Ledger(ledger_url).ensure_scope("s", 1)
    barrier = RACERS.Barrier(4)
    codes = _run_all(workers.release_once, [(ledger_url, "s", "r/p", "p", 0.5, barrier)] * 4)

    # the first reserves; the others resume its reservation (or find it committed) and the
    # later commits lose to the first: one charge, one stored table, whatever the interleaving
    assert set(codes) <= {workers.RELEASED, workers.CONFLICT, workers.STORED}
    assert workers.RELEASED in codes
    ledger = Ledger(ledger_url)
    assert ledger.status("s")[0].spent == Fraction(1, 2)
    assert _charge_count(ledger_url) == 1
    assert Counter(e.kind for e in ledger.history("s"))["committed"] == 1


def test_racers_on_one_slot_with_different_eps_charge_once(ledger_url: str) -> None:
    """Two ε for one slot (say, before and after a cap change): one charge; the other run gets
    the stored copy or is told to void, never a second charge."""
    Ledger(ledger_url).ensure_scope("s", 1)
    barrier = RACERS.Barrier(6)
    args = [(ledger_url, "s", "r/p", "p", eps, barrier) for eps in ("1/4", "1/2") * 3]
    codes = _run_all(workers.release_once, args)

    assert set(codes) <= {workers.RELEASED, workers.CONFLICT, workers.STORED, workers.MISMATCH}
    ledger = Ledger(ledger_url)
    stored = ledger.stored_release("r/p")
    assert stored is not None and _charge_count(ledger_url) == 1
    assert ledger.status("s")[0].spent == stored.epsilon


def test_racers_opening_one_new_scope_make_it_once_with_the_winners_terms(
    ledger_url: str,
) -> None:
    """Eight first releases of one new scope, half under each neighbour definition and each
    with its own cap: the scope is made once, by the first to charge, with that one's cap and
    neighbours; the others under the same neighbours are charged in it, the rest refused."""
    Ledger(ledger_url).close()  # the schema exists: the race is for the scope
    barrier = RACERS.Barrier(8)
    racers = [("add_remove", "substitute")[i % 2] for i in range(8)]
    args = [
        (ledger_url, "s", f"r{i}/-", neighbours, f"{i + 1}/10", barrier)
        for i, neighbours in enumerate(racers)
    ]
    codes = _run_all(workers.open_scope_by_release, args)

    ledger = Ledger(ledger_url)
    [status] = ledger.status()
    winner = status.neighbours
    assert winner is not None
    assert [e.kind for e in ledger.history()].count("scope_created") == 1
    for neighbours, code in zip(racers, codes, strict=True):
        expected = workers.RELEASED if neighbours == winner.value else workers.OTHER_TERMS
        assert code == expected
    first = next(e.release_id for e in ledger.history() if e.kind == "reserved")
    assert first is not None and status.spent == Fraction(4, 100)
    assert status.cap == Fraction(int(first[1 : first.index("/")]) + 1, 10)  # the winner's cap


def test_concurrent_first_open_migrates_once(ledger_url: str) -> None:
    barrier = RACERS.Barrier(4)
    codes = _run_all(workers.open_and_ensure, [(ledger_url, "s", barrier)] * 4)
    assert codes == [0] * 4
    with create_engine(ledger_url).connect() as conn:
        versions = conn.execute(select(schema_version.c.version)).scalars().all()
    assert versions == list(range(1, len(MIGRATIONS) + 1))
    assert [e.kind for e in Ledger(ledger_url).history()] == ["scope_created"]


def test_sigkill_after_reserve_then_same_slot_resumes_with_one_charge(ledger_url: str) -> None:
    ledger = Ledger(ledger_url)
    ledger.ensure_scope("s", 0.5)
    rid = make_release_id("visits_release", "2024-03")
    (code,) = _run_all(workers.reserve_then_die, [(ledger_url, "s", rid, "2024-03", 0.5)])
    assert code == -signal.SIGKILL

    assert ledger.stored_release(rid) is None  # nothing committed, so nothing publishable
    status = ledger.status("s")[0]
    assert (status.spent, status.open_reservations) == (Fraction(1, 2), 1)

    resumed = ledger.reserve(rid, "s", "2024-03", 0.5, spec_hash=workers.SPEC_HASH, run_id="retry")
    assert resumed.status == "resumed"
    ledger.commit(resumed, b"table", {})
    status = ledger.status("s")[0]
    assert (status.spent, status.releases, status.open_reservations) == (Fraction(1, 2), 1, 0)
    assert [(e.kind, e.run_id) for e in ledger.history("s")][1:] == [
        ("reserved", "doomed"),
        ("resumed", "retry"),
        ("committed", "retry"),
    ]


def test_sigkill_then_void_frees_the_budget_for_another_spec(ledger_url: str) -> None:
    ledger = Ledger(ledger_url)
    ledger.ensure_scope("s", 0.5)
    rid = make_release_id("visits_release", "2024-03")
    (code,) = _run_all(workers.reserve_then_die, [(ledger_url, "s", rid, "2024-03", 0.5)])
    assert code == -signal.SIGKILL

    ledger.void(rid, reason="worker killed before commit")
    fresh = ledger.reserve(rid, "s", "2024-03", 0.5, spec_hash="fixed spec", run_id="after")
    assert fresh.charged and ledger.status("s")[0].spent == Fraction(1, 2)
