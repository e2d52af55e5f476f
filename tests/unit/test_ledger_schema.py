"""Opening a ledger (create / existing / read-only) and its schema migrations.

`fixtures/ledger_v1.sqlite` was written by dprelease 0.1 at commit 9ae0b93 (schema version 1,
before this package existed): scopes "visits" (sequential, cap 1) and "cases" (parallel, 1/2);
release ids made by that version's ``make_release_id(asset, period, spec_hash)``:
visits_release/2024-01/<hash> committed (and re-used once), visits_release/2024-02/<hash> open
(its run crashed), cases_release/2024-01/<hash> committed, adhoc/-/<hash> committed then
re-released with force_new, and "custom id" committed (not made by make_release_id).
"""

from __future__ import annotations

import shutil
import sqlite3
from fractions import Fraction
from pathlib import Path

import pytest
from helpers import FIXTURES
from pgtest import fresh_pg_url
from sqlalchemy import create_engine, insert, inspect, select, text

from dprelease.errors import LedgerError, LedgerNotFound, LedgerUnavailable, ReservationMismatch
from dprelease.ledger import MIGRATIONS, Ledger, resolve_ledger_url
from dprelease.ledger.migrations import migrate
from dprelease.ledger.schema import metadata, schema_version
from dprelease.loss import Measure

V1_FIXTURE = FIXTURES / "ledger_v1.sqlite"


@pytest.fixture
def v1_copy(tmp_path: Path) -> Path:
    path = tmp_path / "v1.sqlite"
    shutil.copyfile(V1_FIXTURE, path)
    return path


def _columns(url: str) -> dict[str, dict[str, tuple[str, bool]]]:
    """{table: {column: (type affinity, nullable)}} as the database has them."""
    engine = create_engine(url)
    with engine.connect() as conn:
        found = inspect(conn)
        return {
            name: {
                c["name"]: (type(c["type"]).__name__, c["nullable"])
                for c in found.get_columns(name)
            }
            for name in sorted(found.get_table_names())
        }


# ---- migrations ----------------------------------------------------------------------------


def test_a_new_ledger_gets_every_migration_once(ledger_url: str) -> None:
    ledgers = [Ledger(ledger_url) for _ in range(3)]
    assert [(led.created, led.upgraded_from) for led in ledgers] == [
        (True, 0),
        (False, len(MIGRATIONS)),
        (False, len(MIGRATIONS)),
    ]
    assert ledgers[0].schema_version == len(MIGRATIONS) == 5
    with create_engine(ledger_url).connect() as conn:
        versions = conn.execute(select(schema_version.c.version)).scalars().all()
    assert versions == list(range(1, len(MIGRATIONS) + 1))


def test_the_query_tables_match_what_the_migrations_create(ledger_url: str) -> None:
    """`schema` (used by queries) and the frozen DDL (used to create) must never drift."""
    Ledger(ledger_url)
    created = _columns(ledger_url)
    assert set(created) == set(metadata.tables)
    for name, declared in metadata.tables.items():
        assert {c.name: c.nullable for c in declared.columns} == {
            column: nullable for column, (_, nullable) in created[name].items()
        }, name


def test_frozen_v1_ddl_is_exactly_what_version_1_created(tmp_path: Path) -> None:
    fresh = tmp_path / "fresh-v1.sqlite"
    engine = create_engine(f"sqlite:///{fresh}")
    with engine.begin() as conn:
        MIGRATIONS[0](conn)

    def ddl(path: Path) -> set[str]:
        with sqlite3.connect(path) as conn:
            rows = conn.execute(
                "SELECT sql FROM sqlite_master WHERE name NOT LIKE 'dprelease_schema_version%'"
            )
            return {sql for (sql,) in rows if sql}

    assert ddl(fresh) == ddl(V1_FIXTURE)


def test_upgrading_a_v1_file_gives_the_same_tables_as_a_new_ledger(
    v1_copy: Path, tmp_path: Path
) -> None:
    upgraded = Ledger(str(v1_copy))
    assert (upgraded.created, upgraded.upgraded_from, upgraded.schema_version) == (False, 1, 5)
    Ledger(str(tmp_path / "new.sqlite"))
    assert _columns(f"sqlite:///{v1_copy}") == _columns(f"sqlite:///{tmp_path / 'new.sqlite'}")


def test_a_v1_ledger_keeps_its_budget_and_rereleases_nothing_after_upgrade(v1_copy: Path) -> None:
    before = sqlite3.connect(v1_copy).execute("SELECT count(*) FROM dprelease_events").fetchone()
    ledger = Ledger(str(v1_copy))
    visits, cases = ledger.status("visits")[0], ledger.status("cases")[0]
    assert (visits.spent, visits.releases, visits.open_reservations) == (
        Fraction(1, 4) + Fraction(1, 4) + Fraction(1, 8) * 2 + Fraction(1, 16),
        4,
        1,
    )
    assert (cases.composition, cases.spent) == ("parallel", Fraction(1, 2))
    # schema 3: scopes of earlier ledgers spent ε
    assert (visits.measure, visits.delta, cases.measure) == (Measure.PURE, None, Measure.PURE)

    # v1 ids became slots: a re-run after the upgrade finds the stored copy, charges nothing
    rerun = ledger.reserve("visits_release/2024-01", "visits", "2024-01", "1/4", spec_hash="new")
    assert (rerun.status, rerun.spec_hash, rerun.epsilon) == ("committed", None, Fraction(1, 4))
    stored = ledger.stored_copy(rerun)
    assert stored.manifest["release_id"].startswith("visits_release/2024-01/")  # as published
    adhoc = ledger.stored_release("adhoc/-")
    assert adhoc is not None and adhoc.charge_id == 5  # the re-release supersedes
    assert ledger.stored_release("custom id") is not None  # not a v1 make_release_id: untouched

    # the crashed v1 run's reservation has no comparable spec hash: void it, then release
    with pytest.raises(ReservationMismatch, match="spec not recorded"):
        ledger.reserve("visits_release/2024-02", "visits", "2024-02", "1/4", spec_hash="new")
    ledger.void("visits_release/2024-02", reason="crashed under dprelease 0.1")
    assert ledger.reserve(
        "visits_release/2024-02", "visits", "2024-02", "1/4", spec_hash="new"
    ).charged

    events = ledger.history()
    migrated = [e for e in events if e.kind == "migrated" and "schema 2" in (e.detail or "")]
    assert [(e.scope, e.detail) for e in migrated] == [
        ("cases", migrated[0].detail),
        ("visits", migrated[1].detail),
    ]
    assert "4 charges" in (migrated[1].detail or "") and "1 charge shortened" in (
        migrated[0].detail or ""
    )
    assert events[0].release_id is None and any(
        (e.release_id or "").startswith("visits_release/2024-01/") for e in events[: before[0]]
    )  # the history keeps what happened, under the ids of the time


def test_upgrade_from_v1_on_postgresql() -> None:
    with fresh_pg_url() as url:
        engine = create_engine(url)
        with engine.begin() as conn:
            MIGRATIONS[0](conn)  # exactly version 1, as dprelease 0.1 made it
            conn.execute(
                text(
                    "CREATE TABLE dprelease_schema_version (version INTEGER PRIMARY KEY, "
                    "applied_at TIMESTAMP WITH TIME ZONE NOT NULL)"
                )
            )
            conn.execute(insert(schema_version).values(version=1, applied_at=text("now()")))
            conn.execute(
                text("INSERT INTO dprelease_scopes VALUES ('s', '1', 'sequential', now())")
            )
            conn.execute(
                text(
                    "INSERT INTO dprelease_charges (release_id, scope, period, epsilon, kind, "
                    "status, reserved_at) VALUES (:rid, 's', '2024-01', '1/2', 'release', "
                    "'reserved', now())"
                ),
                {"rid": "a/2024-01/" + "0" * 64},
            )
        engine.dispose()
        ledger = Ledger(url)
        assert ledger.upgraded_from == 1
        assert ledger.status("s")[0].open_reservations == 1
        assert ledger.void("a/2024-01", reason="v1 crash").epsilon == Fraction(1, 2)
        ledger.close()
        assert _columns(url)["dprelease_charges"]["voided_at"][1] is True


def test_newer_schema_is_refused(ledger_url: str) -> None:
    Ledger(ledger_url)
    with create_engine(ledger_url).begin() as conn:
        conn.execute(
            insert(schema_version).values(
                version=len(MIGRATIONS) + 1, applied_at=text("'2030-01-01'")
            )
        )
    for mode in ("create", "existing", "read"):
        with pytest.raises(LedgerError, match="upgrade dprelease"):
            Ledger(ledger_url, mode=mode)


def test_migrate_is_idempotent_within_one_transaction(ledger_url: str) -> None:
    Ledger(ledger_url)
    with create_engine(ledger_url).begin() as conn:
        assert migrate(conn, "test") == len(MIGRATIONS)


# ---- opening -------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["existing", "read"])
def test_missing_sqlite_ledger_is_not_created(tmp_path: Path, mode: str) -> None:
    path = tmp_path / "typo" / "ledgr.sqlite"
    with pytest.raises(LedgerNotFound, match="nothing was created"):
        Ledger(str(path), mode=mode)  # type: ignore[arg-type]
    assert not path.parent.exists()


@pytest.mark.parametrize("mode", ["existing", "read"])
def test_a_database_without_a_ledger_is_not_one(ledger_url: str, mode: str) -> None:
    if ledger_url.startswith("sqlite"):
        Path(ledger_url.removeprefix("sqlite:///")).touch()  # an empty file
    with pytest.raises(LedgerNotFound, match="holds no dprelease ledger"):
        Ledger(ledger_url, mode=mode)  # type: ignore[arg-type]
    assert _columns(ledger_url) == {}


def test_in_memory_ledger_is_always_new() -> None:
    with pytest.raises(LedgerNotFound):
        Ledger("sqlite://", mode="read")


def test_read_only_ledger_reads_but_never_writes(ledger_url: str) -> None:
    writer = Ledger(ledger_url)
    writer.ensure_scope("s", 1)
    reader = Ledger(ledger_url, mode="read")
    assert reader.status("s")[0].cap == 1 and reader.schema_version == len(MIGRATIONS)
    assert [e.kind for e in reader.history()] == ["scope_created"]
    with pytest.raises(LedgerUnavailable, match="read-only|readonly"):
        reader.ensure_scope("t", 1)
    assert [s.name for s in writer.status()] == ["s"]


def test_read_only_open_refuses_an_old_schema_and_names_the_upgrade(v1_copy: Path) -> None:
    with pytest.raises(LedgerError, match="dprelease ledger upgrade"):
        Ledger(str(v1_copy), mode="read")
    assert Ledger(str(v1_copy), mode="existing").upgraded_from == 1
    assert Ledger(str(v1_copy), mode="read").schema_version == len(MIGRATIONS)


def test_resolve_ledger_url_precedence_creates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DPRELEASE_LEDGER_URL", raising=False)
    default = tmp_path / "deep" / "dir" / "ledger.sqlite"
    assert resolve_ledger_url(None, default) == f"sqlite:///{default}"
    assert not default.parent.exists()
    monkeypatch.setenv("DPRELEASE_LEDGER_URL", "postgresql+psycopg://h/env")
    assert resolve_ledger_url(None, default) == "postgresql+psycopg://h/env"
    assert resolve_ledger_url("sqlite:///x.db", default) == "sqlite:///x.db"
    assert resolve_ledger_url(str(tmp_path / "p.sqlite")) == f"sqlite:///{tmp_path / 'p.sqlite'}"


def test_a_release_ledger_makes_its_directories_and_says_it_is_new(tmp_path: Path) -> None:
    nested = tmp_path / "new" / "dir" / "l.sqlite"
    assert Ledger(str(nested)).created and not Ledger(str(nested)).created
