"""The published files of a release, made from the ledger's stored copy only.

Everything is derived from the stored table and manifest, so every run of the same slot (a
re-run, a backfill, the publish-pending sensor) writes the same bytes.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path

import polars as pl

from dprelease.files import atomic_path
from dprelease.ledger import StoredRelease


def _csv(stored: StoredRelease) -> bytes:
    buffer = io.BytesIO()
    pl.read_parquet(io.BytesIO(stored.table_parquet)).write_csv(buffer)
    return buffer.getvalue()


def _manifest(stored: StoredRelease) -> bytes:
    return (json.dumps(stored.manifest, indent=2, sort_keys=True) + "\n").encode()


#: The published files, by name, and how each is made from the ledger's stored copy.
RELEASE_FILES: dict[str, Callable[[StoredRelease], bytes]] = {
    "release.parquet": lambda stored: stored.table_parquet,
    "release.csv": _csv,
    "manifest.json": _manifest,
}


def write_release_files(stored: StoredRelease, out_dir: Path) -> dict[str, Path]:
    """Write the stored release into `out_dir`, each file atomically, the manifest last."""
    written = {}
    for name, encode in RELEASE_FILES.items():
        with atomic_path(out_dir / name) as temporary:
            temporary.write_bytes(encode(stored))
        written[name] = out_dir / name
    return written
