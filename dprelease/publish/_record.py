"""Recording a release: reserve its budget → draw it → commit it to the ledger; then its files.

The CLI and the API call `publish` or `record_release`; the Dagster assets call its two halves,
`record_release` and then (after their blocking checks pass) `write_release_files`; none
re-implements the order. Nothing is
written before the ledger has stored the release, so a crash can leave an open reservation
(resumed by the next run of the same slot, without a second charge) but never a published file
that the ledger does not know. A slot that is already released is returned as stored: re-runs
and backfills give byte-identical files and charge nothing.

A release of randomized answers is drawn before it is reserved (draw → reserve → commit): it is
post-processing of reports that are ε-LDP already, so drawing it spends nothing (a draw that
another run's commit makes redundant is dropped unseen), and it is the one release whose input
can refuse it once read (malformed reports, reports of another wave configuration). Drawn
first, such a refusal has written nothing to the ledger: no charge, no open reservation for the
next run to take over, and nothing to end, so it can never end another run's reservation. A
slot already released is not drawn (a committed charge stays committed): its re-run returns the
stored copy and, as every re-run, never fails on its input.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from functools import cached_property
from pathlib import Path
from typing import Any

import polars as pl

from dprelease import operator
from dprelease.errors import ConfigError, DataError, WaveNotRecorded
from dprelease.ledger import (
    Ledger,
    ReleaseConflict,
    Reservation,
    ReservationStatus,
    StoredRelease,
    make_release_id,
)
from dprelease.loss import amount_text
from dprelease.mechanism.kinds import Prerequisite
from dprelease.mechanism.noise import NoiseSource, default_noise_source, require_private
from dprelease.publish._files import release_folder_problem, write_release_files
from dprelease.publish._prepared import PreparedRelease, Release
from dprelease.spec import TableFormat, missing_writer
from dprelease.statement import LedgerRecord, LegacyManifest, Manifest, parse_manifest

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


@dataclass(frozen=True)
class Recorded:
    """A release as the ledger stores it, and what recording it did.

    `input_changed` (True: this run's input fingerprint differs from the stored release's; None:
    unknown) is for the operator only — log it, never publish it (PRIVACY.md).
    """

    release_id: str
    status: ReservationStatus
    stored: StoredRelease
    requested_epsilon: Fraction  # in the scope's measure: ε, or ρ for a zCDP scope
    input_changed: bool | None = None
    files: dict[str, Path] = field(default_factory=dict)  # written by `publish`, if it was
    unit: str = "ε"  # the symbol of the scope's amounts

    @property
    def charged(self) -> bool:
        """A new charge (a release of randomized answers is recorded charged nothing)."""
        return self.status == "reserved" and self.requested_epsilon != 0

    @cached_property
    def manifest(self) -> Manifest | LegacyManifest:
        """The stored manifest (Legacy: a release stored by an earlier dprelease)."""
        return parse_manifest(self.stored.manifest)

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
        if self.status == "reserved" and self.requested_epsilon == 0:
            return "released and recorded, charged nothing (post-processing of randomized answers)"
        if self.status != "committed":
            return STATUS_TEXT[self.status]
        day = self.stored.committed_at.strftime("%Y-%m-%d")
        text = f"already released on {day}: stored copy returned, nothing charged"
        if self.epsilon_differs:
            text += (
                f" (stored with {self.unit} = {amount_text(self.stored.epsilon)}; this run asked "
                f"for {self.unit} = {amount_text(self.requested_epsilon)}: a release at that "
                f"{self.unit} needs --force-new and is charged)"
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


def _parquet_bytes(table: pl.DataFrame) -> bytes:
    buffer = io.BytesIO()
    table.write_parquet(buffer, statistics=False)
    return buffer.getvalue()


def record_release(
    prepared: PreparedRelease,
    *,
    ledger: Ledger,
    asset: str | None = None,
    run_id: str | None = None,
    force_new: bool = False,
    noise: NoiseSource | None = None,
    allow_unsafe_noise: bool = False,
    on_stage: Callable[[str], None] = lambda stage: None,
) -> Recorded:
    """Reserve ε, draw the release and store it in the ledger; writes no file.

    `prepared` has already validated spec, budget and schema, so bad input never reaches the
    ledger; its budget names the scope (made with its cap and terms together with the first
    charge if the budget says it is new: a refused release leaves no scope behind). The
    slot is `make_release_id(asset, period)`, the asset being the spec's name unless given. A
    released slot is returned as stored
    (nothing charged or drawn); its input is read once to tell the operator whether it changed
    since (`Recorded.input_warning`, logged to the operator channel). Refusals leave the ledger
    unchanged: BudgetExhausted, SpecChanged, ReservationMismatch, CompositionMismatch,
    CapAboveProfile (the ledger's cap exceeds the ε the privacy profile allows), and a release
    of randomized answers' refusals of its reports (MalformedReports,
    ReportsOfAnotherConfiguration: it is drawn before it is reserved, unless its slot is
    released). The input's private fingerprint, from the engine's pass over the data, is kept
    in the ledger only.
    """
    source = noise or default_noise_source()
    require_private(source, allow_unsafe=allow_unsafe_noise)  # refuse before charging anything
    budget = prepared.budget
    for prerequisite in prepared.allocation.prerequisites:
        check_prerequisite(ledger, prerequisite, budget.scope)
    period = None if prepared.period is None else str(prepared.period)
    release_id = make_release_id(asset or prepared.resolved.spec.name, period)
    drawn = None  # randomized answers: drawn first (the module says why), unless released
    if prepared.resolved.spec.of_randomized_answers and (
        force_new or ledger.stored_release(release_id) is None
    ):
        on_stage("reading the reports")
        drawn = prepared.draw(source, allow_unsafe_noise=allow_unsafe_noise)
    on_stage("reserving budget")
    loss = budget.required_loss()
    reservation = ledger.reserve(  # a new scope is made with its first charge, if it gets one
        release_id,
        budget.scope,
        period,
        loss.amount,
        spec_hash=prepared.resolved.hash,
        terms=budget.terms,
        run_id=run_id,
        force_new=force_new,
        max_cap=budget.profile_cap,
        new_scope_cap=budget.cap if budget.new_scope else None,
        selection_delta=prepared.allocation.selection_delta or None,
        selection_delta_budget=budget.selection_delta_budget,
    )
    input_changed = None
    if reservation.status == "committed":
        stored = ledger.stored_copy(reservation)
        on_stage("comparing the input with the released one")
        input_changed = _input_changed(prepared, ledger, reservation, drawn)
    else:
        result = drawn
        if result is None:
            on_stage("aggregating and drawing noise")
            result = prepared.draw(source, allow_unsafe_noise=allow_unsafe_noise)
        record = LedgerRecord(
            scope=budget.scope,
            charge_id=reservation.charge_id,
            rerelease=reservation.rerelease,
        )
        manifest = result.manifest.model_copy(update={"release_id": release_id, "ledger": record})
        on_stage("recording in the ledger")
        try:
            stored = ledger.commit(
                reservation,
                _parquet_bytes(result.table),
                manifest.to_json_dict(),
                input_fingerprint=result.input_fingerprint,
            )
        except ReleaseConflict as conflict:  # another run of this slot committed first: use its
            stored = conflict.stored
    recorded = Recorded(
        release_id,
        reservation.status,
        stored,
        reservation.requested_epsilon,
        input_changed,
        unit=loss.measure.symbol,
    )
    if (warning := recorded.input_warning()) is not None:
        operator.warn(warning)
    return recorded


def check_prerequisite(ledger: Ledger, prerequisite: Prerequisite, scope: str) -> None:
    """The ledger holds the record the release rests on (a wave's charge), made with its
    parameters in its scope; WaveNotRecorded before anything is reserved otherwise."""
    what = prerequisite.what
    stored = ledger.stored_release(prerequisite.release_id)
    if stored is None:
        raise WaveNotRecorded(
            f"{what} is not recorded in ledger {ledger.display_url}: its ε is spent when the "
            "answers are given, so record the wave before collecting (`dprelease local wave "
            "--spec FILE`, dp.local.record_wave) and release its answers after"
        )
    if stored.spec_hash != prerequisite.spec_hash:
        raise WaveNotRecorded(
            f"{what} was recorded with other parameters than this spec states (question, "
            "answers, mechanism, ε or randomizer version); state the wave's parameters as "
            "recorded (`dprelease local wave` prints them)"
        )
    recorded_scope = stored.manifest.get("scope")
    if recorded_scope != scope:
        raise WaveNotRecorded(
            f"{what} was charged to budget scope {recorded_scope!r}, not {scope!r}: release "
            f"its answers in that scope (publish.scope: {recorded_scope}, or --scope)"
        )


def _input_changed(
    prepared: PreparedRelease, ledger: Ledger, reservation: Reservation, drawn: Release | None
) -> bool | None:
    """Whether this run's input differs from the stored release's (None: unknown), from the
    fingerprint of its draw if it drew (another run committed the slot meanwhile), else of one
    more pass. A re-run of a released slot never fails, so an input that cannot be read now
    only gets a warning."""
    if drawn is not None:
        fingerprint = drawn.input_fingerprint
    else:
        try:
            fingerprint = prepared.input_summary().fingerprint
        except (DataError, OSError) as exc:
            operator.warn(
                f"{reservation.release_id}: could not compare the input with the released one "
                f"({exc})"
            )
            return None
    return None if fingerprint is None else ledger.input_changed(reservation, fingerprint)


def publish(
    prepared: PreparedRelease,
    *,
    out_dir: Path,
    formats: Sequence[TableFormat] | None = None,
    on_stage: Callable[[str], None] = lambda stage: None,
    **record_options: Any,
) -> Recorded:
    """`record_release`, then write its files to `out_dir` (the CLI's one-step path), in
    `formats` (default: the spec file's `publish.formats`, else parquet and csv).

    `out_dir` is checked first (ConfigError when the release cannot be published as that
    folder: not writable beside it, or holding other files), so it is refused before anything
    is reserved, not found after the commit."""
    if (problem := release_folder_problem(out_dir)) is not None:
        raise ConfigError("out_dir", problem)
    if formats is not None and (problem := missing_writer(formats)) is not None:
        raise ConfigError("formats", problem)
    recorded = record_release(prepared, on_stage=on_stage, **record_options)
    on_stage("writing files")
    publish = prepared.resolved.publish
    chosen = formats or (None if publish is None else publish.formats)
    files = write_release_files(recorded.stored, out_dir, chosen)
    return replace(recorded, files=files)
