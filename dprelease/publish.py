"""The one path to publication: reserve budget → release → commit to the ledger → write files.

The CLI and the Dagster assets both call `publish`; neither re-implements the order. Nothing is
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
from pathlib import Path
from typing import Any

import polars as pl

from dprelease.errors import ReleaseConflict
from dprelease.ledger import Ledger, StoredRelease, make_release_id
from dprelease.noise import NoiseSource, default_noise_source, require_private
from dprelease.release import PreparedRelease

RELEASE_FILES = ("release.parquet", "release.csv", "manifest.json")


@dataclass(frozen=True)
class Published:
    """What a publication produced, and whether it charged the budget."""

    release_id: str
    status: str  # "reserved" (new charge), "resumed" (crashed run finished), "committed" (stored)
    table: pl.DataFrame
    manifest: dict[str, Any]
    files: dict[str, Path]

    @property
    def charged(self) -> bool:
        return self.status == "reserved"


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


def publish(
    prepared: PreparedRelease,
    *,
    ledger: Ledger,
    scope: str,
    asset: str,
    out_dir: Path,
    run_id: str | None = None,
    force_new: bool = False,
    noise: NoiseSource | None = None,
    allow_unsafe_noise: bool = False,
    on_stage: Callable[[str], None] = lambda stage: None,
) -> Published:
    """Release `prepared` through the ledger and write its files to `out_dir`.

    `prepared` has already validated spec, ε and schema, so bad input never reaches the ledger.
    Raises `BudgetExhausted` (nothing charged, nothing written) when the scope's cap would be
    exceeded.
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
    on_stage("writing files")
    files = write_release_files(stored, out_dir)
    table = pl.read_parquet(io.BytesIO(stored.table_parquet))
    return Published(release_id, reservation.status, table, stored.manifest, files)
