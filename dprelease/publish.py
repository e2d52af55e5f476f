"""The one path to publication: reserve budget → release → commit to the ledger → write files.

The CLI calls `publish`; the Dagster assets call its two halves, `record_release` and then (after
their blocking checks pass) `write_release_files`; neither re-implements the order. Nothing is
written before the ledger has stored the release, so a crash can leave an open reservation
(resumed by the next run of the same slot, without a second charge) but never a published file
that the ledger does not know. A slot that is already released is returned as stored: re-runs
and backfills give byte-identical files and charge nothing.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property
from pathlib import Path
from typing import Any

import polars as pl

from dprelease import operator
from dprelease.errors import DataError, ReleaseConflict
from dprelease.files import atomic_path
from dprelease.ledger import (
    Composition,
    Ledger,
    Reservation,
    ReservationStatus,
    StoredRelease,
    make_release_id,
)
from dprelease.noise import NoiseSource, default_noise_source, require_private
from dprelease.pure_release import PreparedRelease
from dprelease.spec import LoadedSpec

#: What the ledger did for a release, in words for people (keys: `Reservation.status`).
STATUS_TEXT: dict[ReservationStatus, str] = {
    "reserved": "released and charged",
    # The ledger knows only that an open reservation existed: its run may have died or may
    # still be drawing. Either way one charge covers both and the first commit is the release.
    "resumed": "took over an open reservation of this release made by another run, which may "
    "have died or may still be running (charged once; the first run to commit stores the "
    "release, and both publish it)",
    "committed": "already released: stored copy returned, nothing charged",
}


def _fmt(value: Fraction) -> str:
    return f"{float(value):g}"


def composition_of(loaded: LoadedSpec) -> Composition:
    """How the spec's periods compose (sequential when it has none): its scope must agree."""
    period = loaded.spec.period
    return "sequential" if period is None else period.composition


@dataclass(frozen=True)
class Recorded:
    """A release as the ledger stores it, and what recording it did.

    `input_changed` (True: this run's input fingerprint differs from the stored release's; None:
    unknown) is for the operator only — log it, never publish it (PRIVACY.md).
    """

    release_id: str
    status: ReservationStatus
    stored: StoredRelease
    requested_epsilon: Fraction
    input_changed: bool | None = None

    @property
    def charged(self) -> bool:
        return self.status == "reserved"

    @property
    def manifest(self) -> dict[str, Any]:
        return self.stored.manifest

    @property
    def epsilon_differs(self) -> bool:
        """The stored ε is not what this run asked for (the cap or ε changed since)."""
        return self.stored.epsilon != self.requested_epsilon

    @cached_property
    def table(self) -> pl.DataFrame:
        """The stored noisy table, decoded once."""
        return pl.read_parquet(io.BytesIO(self.stored.table_parquet))

    def describe(self) -> str:
        """What the ledger did, in words (safe to show anywhere: depends on no data)."""
        if self.status != "committed":
            return STATUS_TEXT[self.status]
        day = self.stored.committed_at.strftime("%Y-%m-%d")
        text = f"already released on {day}: stored copy returned, nothing charged"
        if self.epsilon_differs:
            text += (
                f" (stored with ε = {_fmt(self.stored.epsilon)}; this run asked for ε = "
                f"{_fmt(self.requested_epsilon)}: a release at that ε needs --force-new and is "
                "charged)"
            )
        return text

    def input_warning(self) -> str | None:
        """For the operator channel only: the input changed since the stored release."""
        if not self.input_changed:
            return None
        day = self.stored.committed_at.strftime("%Y-%m-%d")
        return (
            f"{self.release_id}: the input differs from the one released on {day}; the stored "
            "release (from the earlier input) was returned. To release the new input, release "
            "anew with --force-new (force_new=True in Python; charged again)"
        )


@dataclass(frozen=True)
class Published(Recorded):
    """A recorded release and the files written from the ledger's copy."""

    files: dict[str, Path] = field(default_factory=dict, kw_only=True)


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
    """Write the stored release into `out_dir`, each file atomically, the manifest last.

    Everything is derived from the ledger's copy, so every run of the same slot writes the same
    bytes.
    """
    written = {}
    for name, encode in RELEASE_FILES.items():
        with atomic_path(out_dir / name) as temporary:
            temporary.write_bytes(encode(stored))
        written[name] = out_dir / name
    return written


def _parquet_bytes(table: pl.DataFrame) -> bytes:
    buffer = io.BytesIO()
    table.write_parquet(buffer, statistics=False)
    return buffer.getvalue()


def record_release(
    prepared: PreparedRelease,
    *,
    ledger: Ledger,
    scope: str,
    asset: str,
    run_id: str | None = None,
    force_new: bool = False,
    max_cap: Fraction | None = None,
    noise: NoiseSource | None = None,
    allow_unsafe_noise: bool = False,
    on_stage: Callable[[str], None] = lambda stage: None,
) -> Recorded:
    """Reserve ε, draw the release and store it in the ledger; writes no file.

    `prepared` has already validated spec, ε and schema, so bad input never reaches the ledger.
    The slot is `make_release_id(asset, prepared.period)`. A released slot is returned as stored
    (nothing charged or drawn); its input is read once to tell the operator whether it changed
    since (`Recorded.input_warning`, logged to the operator channel). Refusals leave the ledger
    unchanged: BudgetExhausted, SpecChanged, ReservationMismatch, CompositionMismatch,
    CapAboveProfile (the ledger's cap exceeds `max_cap`, the ε the privacy profile allows). The
    input's private fingerprint, from the engine's pass over the data, is kept in the ledger only.
    """
    source = noise or default_noise_source()
    require_private(source, allow_unsafe=allow_unsafe_noise)  # refuse before charging anything
    release_id = make_release_id(asset, prepared.period)
    on_stage("reserving budget")
    reservation = ledger.reserve(
        release_id,
        scope,
        prepared.period,
        prepared.plan.epsilon_total,
        spec_hash=prepared.spec_hash,
        composition=composition_of(prepared.loaded),
        run_id=run_id,
        force_new=force_new,
        max_cap=max_cap,
    )
    input_changed = None
    if reservation.status == "committed":
        stored = ledger.stored_copy(reservation)
        on_stage("comparing the input with the released one")
        input_changed = _input_changed(prepared, ledger, reservation)
    else:
        on_stage("aggregating and drawing noise")
        result = prepared.run(source, allow_unsafe_noise=allow_unsafe_noise)
        manifest = {
            **result.manifest,
            "release_id": release_id,
            "ledger": {
                "recorded": True,
                "scope": scope,
                "charge_id": reservation.charge_id,
                "rerelease": reservation.rerelease,
            },
        }
        on_stage("recording in the ledger")
        try:
            stored = ledger.commit(
                reservation,
                _parquet_bytes(result.table),
                manifest,
                input_fingerprint=result.input_fingerprint,
            )
        except ReleaseConflict as conflict:  # another run of this slot committed first: use its
            stored = conflict.stored
    recorded = Recorded(
        release_id, reservation.status, stored, reservation.requested_epsilon, input_changed
    )
    if (warning := recorded.input_warning()) is not None:
        operator.warn(warning)
    return recorded


def _input_changed(
    prepared: PreparedRelease, ledger: Ledger, reservation: Reservation
) -> bool | None:
    """Whether this run's input differs from the stored release's (None: unknown). A re-run of
    a released slot never fails, so an input that cannot be read now only gets a warning."""
    try:
        fingerprint = prepared.input_summary().fingerprint
    except (DataError, OSError) as exc:
        operator.warn(
            f"{reservation.release_id}: could not compare the input with the released one ({exc})"
        )
        return None
    return ledger.input_changed(reservation, fingerprint)


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
    return Published(
        recorded.release_id,
        recorded.status,
        recorded.stored,
        recorded.requested_epsilon,
        recorded.input_changed,
        files=files,
    )
