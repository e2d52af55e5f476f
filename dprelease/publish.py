"""The one path to publication: reserve budget → release → commit to the ledger → write files.

The CLI calls `publish`; the Dagster assets call its two halves, `record_release` and then (after
their blocking checks pass) `write_release_files`; neither re-implements the order. Nothing is
written before the ledger has stored the release, so a crash can leave an uncommitted reservation
(resumed by the next run of the same release id, without a second charge) but never a published
file that the ledger does not know. A release id that is already stored is returned as stored:
re-runs and backfills give byte-identical files and charge nothing.
"""

from __future__ import annotations

import io
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import polars as pl

from dprelease.errors import ReleaseConflict
from dprelease.ledger import Ledger, StoredRelease, make_release_id
from dprelease.noise import NoiseSource, default_noise_source, require_private
from dprelease.release import PreparedRelease

RELEASE_FILES = ("release.parquet", "release.csv", "manifest.json")
#: What the ledger did for a release, in words for people (keys: `Reservation.status`).
STATUS_TEXT = {
    "reserved": "released and charged",
    "resumed": "finished an interrupted release (charged once)",
    "committed": "already released: stored copy returned, nothing charged",
}


@dataclass(frozen=True)
class Recorded:
    """A release as the ledger stores it, and whether recording it charged the budget."""

    release_id: str
    status: str  # "reserved" (new charge), "resumed" (crashed run finished), "committed" (stored)
    stored: StoredRelease

    @property
    def charged(self) -> bool:
        return self.status == "reserved"

    @property
    def manifest(self) -> dict[str, Any]:
        return self.stored.manifest

    @cached_property
    def table(self) -> pl.DataFrame:
        """The stored noisy table, decoded once."""
        return pl.read_parquet(io.BytesIO(self.stored.table_parquet))


@dataclass(frozen=True)
class Published(Recorded):
    """A recorded release and the files written from the ledger's copy."""

    files: dict[str, Path]


def _parquet_bytes(table: pl.DataFrame) -> bytes:
    buffer = io.BytesIO()
    table.write_parquet(buffer, statistics=False)
    return buffer.getvalue()


def write_release_files(stored: StoredRelease, out_dir: Path) -> dict[str, Path]:
    """Write the stored release into `out_dir`, each file atomically (temp file + rename).

    Everything is derived from the ledger's copy, so every run of the same release id writes the
    same bytes.
    """
    table = pl.read_parquet(io.BytesIO(stored.table_parquet))
    csv = io.BytesIO()
    table.write_csv(csv)
    contents = {
        "release.parquet": stored.table_parquet,
        "release.csv": csv.getvalue(),
        "manifest.json": (json.dumps(stored.manifest, indent=2, sort_keys=True) + "\n").encode(),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    written = {}
    for name, data in contents.items():
        handle, temporary = tempfile.mkstemp(dir=out_dir, prefix=f".{name}.")
        with os.fdopen(handle, "wb") as file:
            file.write(data)
        os.replace(temporary, out_dir / name)
        written[name] = out_dir / name
    return written


def record_release(
    prepared: PreparedRelease,
    *,
    ledger: Ledger,
    scope: str,
    asset: str,
    run_id: str | None = None,
    force_new: bool = False,
    noise: NoiseSource | None = None,
    allow_unsafe_noise: bool = False,
    on_stage: Callable[[str], None] = lambda stage: None,
) -> Recorded:
    """Reserve ε, draw the release and store it in the ledger; writes no file.

    `prepared` has already validated spec, ε and schema, so bad input never reaches the ledger.
    Raises `BudgetExhausted` (nothing charged) when the scope's cap would be exceeded. A release
    id the ledger already stores is returned as stored, with nothing charged or drawn.
    """
    source = noise or default_noise_source()
    require_private(source, allow_unsafe=allow_unsafe_noise)  # refuse before charging anything
    release_id = make_release_id(asset, prepared.period, prepared.spec_hash)
    on_stage("reserving budget")
    reservation = ledger.reserve(
        release_id,
        scope,
        prepared.period,
        prepared.plan.epsilon_total,
        run_id=run_id,
        force_new=force_new,
    )
    stored = ledger.stored_release(release_id) if reservation.status == "committed" else None
    if stored is None:
        on_stage("aggregating and drawing noise")
        result = prepared.run(source, allow_unsafe_noise=allow_unsafe_noise)
        manifest = {
            **result.manifest,
            "release_id": release_id,
            "ledger": {
                "scope": scope,
                "charge_id": reservation.charge_id,
                "rerelease": reservation.rerelease,
            },
        }
        on_stage("recording in the ledger")
        try:
            stored = ledger.commit(reservation, _parquet_bytes(result.table), manifest)
        except ReleaseConflict as conflict:  # another run of this id committed first: use its
            stored = conflict.stored
    return Recorded(release_id, reservation.status, stored)


def publish(
    prepared: PreparedRelease,
    *,
    out_dir: Path,
    on_stage: Callable[[str], None] = lambda stage: None,
    **record_options: Any,
) -> Published:
    """`record_release`, then write its files to `out_dir` (the CLI's one-step path)."""
    recorded = record_release(prepared, on_stage=on_stage, **record_options)
    on_stage("writing files")
    files = write_release_files(recorded.stored, out_dir)
    return Published(recorded.release_id, recorded.status, recorded.stored, files)
