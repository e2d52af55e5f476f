"""The ledger's tables as the queries see them: the shape after the last migration.

These definitions are for reading and writing rows only, never for creating tables: the tables
are made by the frozen DDL in `migrations` (tests check that both agree). Change the schema by
appending a migration there, then update this file to match.

Amounts (caps, charges) are stored exactly, as rational ``"p/q"`` strings, in the scope's measure:
ε for a `pure` scope, ρ for a `zcdp` one (the `epsilon` columns keep their first name).
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
)

metadata = MetaData()
_ID = BigInteger().with_variant(Integer, "sqlite")  # SQLite: INTEGER PRIMARY KEY is the rowid

schema_version = Table(
    "dprelease_schema_version",
    metadata,
    Column("version", Integer, primary_key=True),
    Column("applied_at", DateTime(timezone=True), nullable=False),
)

scopes = Table(
    "dprelease_scopes",
    metadata,
    Column("name", String(200), primary_key=True),
    Column("cap", Text, nullable=False),
    Column("composition", String(16), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    # migration 3
    Column("measure", String(8)),  # loss.Measure: "pure" (ε) or "zcdp" (ρ)
    Column("delta", Text),  # zcdp: the δ the odds statement is read at (repr of a float)
    # migration 4: the rest of what the guarantee rests on (records.ScopeTerms); NULL: not yet
    Column("neighbours", String(16)),  # change.ProtectedChange: "add_remove" | "substitute"
    Column("privacy_unit", Text),  # change.PrivacyUnit.key: "row" | "column:<name>"
    Column("period_column", Text),  # parallel: the date column whose months are the periods
    # migration 5: key selection's δ budget for life (exact rational; NULL: none yet; deltas)
    Column("selection_delta", Text),
)

charges = Table(
    "dprelease_charges",
    metadata,
    Column("charge_id", _ID, primary_key=True, autoincrement=True),
    Column("release_id", String(500), nullable=False),
    Column("scope", String(200), ForeignKey("dprelease_scopes.name"), nullable=False),
    Column("period", String(200)),
    Column("epsilon", Text, nullable=False),
    Column("kind", String(16), nullable=False),  # "release" | "re-release"
    Column("status", String(16), nullable=False),  # records.ChargeStatus
    Column("run_id", String(500)),
    Column("reserved_at", DateTime(timezone=True), nullable=False),
    Column("committed_at", DateTime(timezone=True)),
    # migration 2
    Column("spec_hash", String(64)),
    Column("input_fingerprint", String(128)),  # private: never exported, published or logged
    Column("voided_at", DateTime(timezone=True)),
    # migration 5: the δ this charge's key selections spend (exact rational; NULL: none)
    Column("selection_delta", Text),
    Index("ix_dprelease_charges_release_id", "release_id"),
    Index("ix_dprelease_charges_scope_period", "scope", "period"),
)

releases = Table(
    "dprelease_releases",
    metadata,
    Column("charge_id", _ID, ForeignKey("dprelease_charges.charge_id"), primary_key=True),
    Column("release_id", String(500), nullable=False),
    Column("table_parquet", LargeBinary, nullable=False),
    Column("table_sha256", String(64), nullable=False),
    Column("manifest", Text, nullable=False),  # JSON
    Column("committed_at", DateTime(timezone=True), nullable=False),
)

events = Table(
    "dprelease_events",
    metadata,
    Column("event_id", _ID, primary_key=True, autoincrement=True),
    Column("at", DateTime(timezone=True), nullable=False),
    Column("kind", String(32), nullable=False),  # records.EventKind
    Column("scope", String(200), nullable=False),
    Column("release_id", String(500)),
    Column("period", String(200)),
    Column("epsilon", Text),
    Column("charge_id", _ID),
    Column("status", String(16)),
    Column("run_id", String(500)),
    Column("actor", String(300), nullable=False),
    Column("detail", Text),
    Index("ix_dprelease_events_scope", "scope"),
)
