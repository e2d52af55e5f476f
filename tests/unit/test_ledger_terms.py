"""A scope keeps the terms of its guarantee for life (`ScopeTerms`): in the ledger itself, so a
release that slips past `decide_budget` (a race, or a caller of the ledger alone) is refused in
the transaction that would charge it; and ledger migration 4, which gives the scopes of earlier
ledgers the neighbours and privacy unit their stored releases were made under."""

from __future__ import annotations

import json
import logging
import shutil
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from helpers import FIXTURES
from sqlalchemy import DateTime, column, create_engine, insert, table

from dprelease.change import PrivacyUnit, ProtectedChange
from dprelease.errors import (
    CompositionMismatch,
    NeighboursMismatch,
    PrivacyUnitMismatch,
    UnknownScope,
)
from dprelease.ledger import MIGRATIONS, Ledger, ScopeTerms
from dprelease.ledger.schema import charges, releases, schema_version
from dprelease.operator import LOGGER_NAME

ADD_REMOVE, SUBSTITUTE = ProtectedChange.ADD_REMOVE, ProtectedChange.SUBSTITUTE
PID = PrivacyUnit("pid")
ROWS = PrivacyUnit(None)


def terms(**given: Any) -> ScopeTerms:
    return ScopeTerms(**{"neighbours": ADD_REMOVE, "unit": PID, **given})


def state(ledger: Ledger) -> dict[str, Any]:
    dump = ledger.export()
    del dump["exported_at"]
    return dump


# -- the ledger keeps them -----------------------------------------------------------------------


def test_a_scope_is_made_with_its_first_charge_and_keeps_its_terms(ledger_url: str) -> None:
    ledger = Ledger(ledger_url)
    with pytest.raises(UnknownScope):  # no cap for a new scope: no scope
        ledger.reserve("a/-", "s", None, "1/4", spec_hash="h", terms=terms())
    first = ledger.reserve(
        "a/-", "s", None, "1/4", spec_hash="h", terms=terms(neighbours=SUBSTITUTE),
        new_scope_cap=1,
    )  # fmt: skip
    assert first.charged
    status = ledger.status("s")[0]
    assert (status.cap, status.neighbours, status.privacy_unit) == (1, SUBSTITUTE, PID)
    assert [e.kind for e in ledger.history("s")] == ["scope_created", "reserved"]
    before = state(ledger)
    with pytest.raises(NeighboursMismatch, match="protects substitute neighbours"):
        ledger.reserve("b/-", "s", None, "1/4", spec_hash="h", terms=terms(), new_scope_cap=9)
    with pytest.raises(PrivacyUnitMismatch, match="privacy unit of column 'pid'.*each row"):
        ledger.reserve(
            "b/-", "s", None, "1/4", spec_hash="h", terms=terms(neighbours=SUBSTITUTE, unit=ROWS)
        )
    assert state(ledger) == before
    assert ledger.status("s")[0].cap == 1  # a later cap for a "new" scope never applies


def test_a_refused_first_charge_leaves_no_scope(ledger_url: str) -> None:
    ledger = Ledger(ledger_url)
    ledger.reserve("a/-", "s", None, "1/4", spec_hash="h", terms=terms(), new_scope_cap=1)
    before = state(ledger)
    for refused in (
        dict(release_id="a/-", epsilon="1/4"),  # the slot belongs to scope s
        dict(release_id="b/-", epsilon=10**9),  # more than the cap
    ):
        with pytest.raises(Exception):  # noqa: B017 (each its own error; the state is the point)
            ledger.reserve(
                refused["release_id"], "new", None, refused["epsilon"], spec_hash="h",
                terms=terms(), new_scope_cap=1,
            )  # fmt: skip
    with pytest.raises(Exception):  # noqa: B017
        ledger.reserve("c/-", "new", None, "1", spec_hash="h", terms=terms(), new_scope_cap=2,
                       max_cap=Fraction(1))  # fmt: skip
    assert state(ledger) == before


def test_a_parallel_scope_keeps_the_column_of_its_months(ledger_url: str) -> None:
    ledger = Ledger(ledger_url)
    by_day = terms(composition="parallel", period_column="day")
    ledger.reserve("a/2024-01", "p", "2024-01", 1, spec_hash="h", terms=by_day, new_scope_cap=1)
    assert ledger.status("p")[0].period_column == "day"
    with pytest.raises(CompositionMismatch, match="cut by column 'day'.*'discharged'"):
        ledger.reserve("b/2024-02", "p", "2024-02", 1, spec_hash="h",
                       terms=terms(composition="parallel", period_column="discharged"))  # fmt: skip
    sequential = terms(period_column=None)
    ledger.reserve("a/-", "q", None, 1, spec_hash="h", terms=sequential, new_scope_cap=1)
    assert ledger.status("q")[0].period_column is None  # sequential: every charge adds up


def test_a_scope_made_without_terms_takes_them_from_its_first_charge(ledger_url: str) -> None:
    ledger = Ledger(ledger_url)
    ledger.ensure_scope("s", 1)  # the low-level way: no terms stated
    assert ledger.status("s")[0].neighbours is None
    ledger.reserve("a/-", "s", None, "1/4", spec_hash="h", terms=terms())
    status = ledger.status("s")[0]
    assert (status.neighbours, status.privacy_unit) == (ADD_REMOVE, PID)
    fixed = [e for e in ledger.history("s") if e.kind == "terms_fixed"]
    assert [e.detail for e in fixed] == [
        "kept for life: add_remove neighbours, privacy unit column 'pid'"
    ]
    with pytest.raises(NeighboursMismatch):
        ledger.ensure_scope("s", 1, neighbours=SUBSTITUTE)
    ledger.reserve("b/-", "s", None, "1/4", spec_hash="h")  # states nothing: checks nothing


def test_two_first_releases_of_one_new_scope_make_it_once(ledger_url: str) -> None:
    """In one process the second finds the scope the first made (the races tier runs real
    processes): the later `new_scope_cap` is not applied and other terms are refused."""
    one, two = Ledger(ledger_url), Ledger(ledger_url)
    one.reserve("a/-", "s", None, "1/4", spec_hash="h", terms=terms(), new_scope_cap=1)
    assert two.reserve("b/-", "s", None, "1/4", spec_hash="h", terms=terms(), new_scope_cap=5)
    assert two.status("s")[0].cap == 1
    with pytest.raises(PrivacyUnitMismatch):
        two.reserve("c/-", "s", None, "1/4", spec_hash="h", terms=terms(unit=PrivacyUnit("hh")),
                    new_scope_cap=1)  # fmt: skip


# -- migration 4 ---------------------------------------------------------------------------------


def test_v1_scopes_that_spent_keep_substitute_until_their_releases_say_otherwise(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The fixture's stored manifests are stubs that name no neighbours: its scopes have spent,
    so they keep `substitute` (the reading under which the cap never exceeds its odds factor);
    their unit is fixed by their next release."""
    path = tmp_path / "v1.sqlite"
    shutil.copyfile(FIXTURES / "ledger_v1.sqlite", path)
    with caplog.at_level(logging.WARNING, logger=LOGGER_NAME):
        ledger = Ledger(str(path))
    for name in ("visits", "cases"):
        status = ledger.status(name)[0]
        assert (status.neighbours, status.privacy_unit) == (SUBSTITUTE, None)
    detail = next(e.detail for e in ledger.history("visits") if "schema 4" in (e.detail or ""))
    assert detail is not None and "substitute neighbours (its stored releases do not say" in detail
    assert "privacy unit: not fixed yet" in detail
    assert any("scope 'visits'" in r.getMessage() for r in caplog.records)  # told, to review
    with pytest.raises(NeighboursMismatch):
        ledger.reserve("new/2024-05", "visits", "2024-05", "1/16", spec_hash="h", terms=terms())
    ledger.reserve("new/2024-05", "visits", "2024-05", "1/16", spec_hash="h",
                   terms=terms(neighbours=SUBSTITUTE))  # fmt: skip
    assert ledger.status("visits")[0].privacy_unit == PID


def _manifest(neighbours: str | None, unit: str | None) -> str:
    """A stored manifest as earlier versions wrote one, reduced to what migration 4 reads."""
    data: dict[str, Any] = {"epsilon_total": 0.1}
    if neighbours is not None:
        data["neighbours"] = neighbours
    if unit == "row":
        data |= {"privacy_unit": "each row is a privacy unit",
                 "contribution_bounds": {"how": "each row is a privacy unit"}}  # fmt: skip
    elif unit is not None:
        data["privacy_unit"] = unit
    return json.dumps(data)


#: Per scope (name, composition): its charges as (status, neighbours, unit) of their manifests.
V3_SCOPES: dict[tuple[str, str], list[tuple[str, str | None, str | None]]] = {
    ("agree", "sequential"): [("committed", "add_remove", "pid")] * 2,
    ("mixed", "sequential"): [
        ("committed", "add_remove", "row"),
        ("committed", "substitute", "hh"),
    ],
    ("rows", "sequential"): [("committed", "substitute", "row"), ("reserved", None, None)],
    ("months", "parallel"): [("committed", "add_remove", "pid")],
    ("voided_only", "sequential"): [("voided", None, None)],
    ("unused", "sequential"): [],
}


#: The scopes table of schema version 3 (charges and releases are as today's).
V3_SCOPES_TABLE = table(
    "dprelease_scopes",
    column("name"),
    column("cap"),
    column("composition"),
    column("created_at", DateTime(timezone=True)),
    column("measure"),
)


def _v3_ledger(url: str) -> None:
    """A ledger at schema version 3 holding `V3_SCOPES`."""
    engine = create_engine(url)
    at = datetime(2025, 1, 1, tzinfo=UTC)
    with engine.begin() as conn:
        schema_version.create(conn)
        for version, migration in enumerate(MIGRATIONS[:3], start=1):
            migration(conn)
            conn.execute(insert(schema_version).values(version=version, applied_at=at))
        for (name, composition), made in V3_SCOPES.items():
            conn.execute(
                insert(V3_SCOPES_TABLE).values(
                    name=name, cap="1", composition=composition, created_at=at, measure="pure"
                )
            )
            for number, (status, neighbours, unit) in enumerate(made):
                release_id = f"{name}/{number}"
                charge_id = conn.execute(
                    insert(charges)
                    .values(
                        release_id=release_id,
                        scope=name,
                        period="2024-01",
                        epsilon="1/10",
                        kind="release",
                        status=status,
                        reserved_at=at,
                        spec_hash="h",
                    )
                    .returning(charges.c.charge_id)
                ).scalar_one()
                if status == "committed":
                    conn.execute(
                        insert(releases).values(
                            charge_id=charge_id,
                            release_id=release_id,
                            table_parquet=b"t",
                            table_sha256="0" * 64,
                            manifest=_manifest(neighbours, unit),
                            committed_at=at,
                        )
                    )
    engine.dispose()


def test_migration_4_reads_the_terms_from_stored_releases(ledger_url: str) -> None:
    _v3_ledger(ledger_url)
    ledger = Ledger(ledger_url)
    assert (ledger.upgraded_from, ledger.schema_version) == (3, 5)
    kept = {s.name: (s.neighbours, s.privacy_unit, s.period_column) for s in ledger.status()}
    assert kept == {
        "agree": (ADD_REMOVE, PID, None),
        "mixed": (SUBSTITUTE, ROWS, None),  # both kinds: substitute; the first release's unit
        "rows": (SUBSTITUTE, ROWS, None),
        "months": (ADD_REMOVE, PID, None),  # the column of its months: fixed by its next release
        "voided_only": (None, None, None),  # spent nothing: its next release fixes all
        "unused": (None, None, None),
    }
    details = {e.scope: e.detail or "" for e in ledger.history() if e.kind == "migrated"}
    assert set(details) == {"agree", "mixed", "rows", "months"}
    assert "add_remove neighbours (its 2 stored release(s) say so)" in details["agree"]
    assert "made under add_remove (1) and substitute (1)" in details["mixed"]
    assert "also used column 'hh'" in details["mixed"]
    assert "the column of its months: fixed by its next release" in details["months"]
    by_day = terms(composition="parallel", period_column="day")
    ledger.reserve("m/2024-02", "months", "2024-02", "1/10", spec_hash="h", terms=by_day)
    assert ledger.status("months")[0].period_column == "day"


# -- the checks are statements, not asserts (`python -O` strips asserts) -------------------------


def test_a_scope_row_missing_without_a_cap_is_unknown_scope_not_an_assert(
    ledger_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`reserve` makes a scope only with a cap. Were the scope's row missing while no cap was
    given (`_scope_row` raises UnknownScope itself today; here it is bypassed), the check is an
    explicit UnknownScope that `python -O` keeps, and nothing is written (it was an `assert`)."""
    import dprelease.ledger.protocol as protocol

    ledger = Ledger(ledger_url)
    before = state(ledger)
    monkeypatch.setattr(protocol, "_scope_row", lambda *args, **kwargs: None)
    with pytest.raises(UnknownScope, match="only with its cap"):
        ledger.reserve("a/-", "s", None, "1/4", spec_hash="h", terms=terms())
    assert state(ledger) == before


@pytest.mark.parametrize(
    ("kept", "asked", "refused"),
    [
        (terms(neighbours=SUBSTITUTE), terms(), NeighboursMismatch),
        (terms(neighbours=None), terms(), None),  # not fixed yet: not compared
        (terms(), terms(neighbours=None), None),
        (terms(unit=ROWS), terms(), PrivacyUnitMismatch),
        (terms(unit=None), terms(), None),
        (terms(), terms(unit=None), None),
        (terms(), terms(), None),
    ],
)
def test_the_neighbours_and_unit_checks_compare_only_stated_terms(
    kept: ScopeTerms, asked: ScopeTerms, refused: type[Exception] | None
) -> None:
    """`terms_conflict` directly: a stated term that differs is refused, one side None is not
    compared (the narrowing is in the condition itself, no `assert` that `-O` would drop)."""
    from dprelease.ledger.scopes import terms_conflict

    got = terms_conflict("s", kept, asked)
    assert (None if got is None else type(got)) is refused
