"""A release prepared and drawn: everything decided from public inputs, then the data read once.

`prepare` decides everything from the spec, the budget, the period and the input's declared
schema without reading a row (the allocation of the loss, sensitivity, granularity, noise scales,
with margins every level's margins of error, the manifest), so every refusal happens before a
ledger is charged; `PreparedRelease.draw` then reads the data, draws the noise and
post-processes, and nothing in it can fail because of a data value, but for a release of
randomized answers: its reports refuse it when malformed or of another wave configuration, so
`record_release` draws it before it reserves (drawing it spends nothing). Nothing here knows about
ledgers or files. PRIVACY.md states the rule this follows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from dprelease.mechanism import (
    Allocation,
    DataSource,
    InputSummary,
    MarginAccuracy,
    allocate,
    check_input,
    compute,
    margin_accuracy,
    summarize_input,
)
from dprelease.mechanism.noise import NoiseSource, default_noise_source, require_private
from dprelease.period import Period
from dprelease.publication import finish
from dprelease.publish._budget import Budget
from dprelease.spec import ResolvedSpec, period_of
from dprelease.statement import (
    Manifest,
    NoiseSourceEntry,
    build_manifest,
    with_outcome,
    with_selected_keys,
)


def noise_source_entry(source: NoiseSource) -> NoiseSourceEntry:
    """What the manifest says of a noise source: only a private one makes a publishable release."""
    return NoiseSourceEntry(
        bits=source.bit_source, seeded=source.is_seeded, private=not source.is_seeded
    )


@dataclass(frozen=True)
class Release:
    """A drawn release: the only two things that may be published, and the private input
    fingerprint the ledger keeps (never published)."""

    table: pl.DataFrame
    manifest: Manifest
    input_fingerprint: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class PreparedRelease:
    """A validated release waiting for its data and noise: everything it will publish but the
    noisy values is already decided (`manifest`, as drawn from the system CSPRNG and, with
    margins, as planned: only a solver fallback would change it)."""

    data: DataSource
    resolved: ResolvedSpec
    budget: Budget
    allocation: Allocation
    margins: MarginAccuracy | None
    period: Period | None
    engine: str
    manifest: Manifest

    def draw(
        self, noise: NoiseSource | None = None, *, allow_unsafe_noise: bool = False
    ) -> Release:
        """Aggregate exactly, add one batch of exact noise per measurement (and level), then
        post-process; the batch size is the public grid (level) size, never a data value."""
        source = noise or default_noise_source()
        require_private(source, allow_unsafe=allow_unsafe_noise)
        computed = compute(
            self.data,
            self.resolved,
            self.allocation,
            self.margins,
            self.period,
            self.engine,
            source,
        )
        manifest = self.manifest.model_copy(update={"noise_source": noise_source_entry(source)})
        if self.allocation.selections and computed.resolved is not None:
            manifest = with_selected_keys(manifest, computed.resolved)
        if self.margins is not None and computed.outcome is not None:
            post = self.resolved.spec.postprocess
            manifest = with_outcome(manifest, self.allocation, post, self.margins, computed.outcome)
        table, manifest = finish(computed.table, manifest, self.resolved, source)
        return Release(table, manifest, computed.summary.fingerprint)

    def input_summary(self) -> InputSummary:
        """The private input summary alone (one pass over the input; no noise, no release):
        for a re-run whose stored release is returned, to tell whether the input changed."""
        return summarize_input(self.data, self.resolved, self.allocation, self.period, self.engine)


def prepare(
    data: DataSource,
    resolved: ResolvedSpec,
    budget: Budget,
    *,
    period: str | None = None,
    engine: str | None = None,
) -> PreparedRelease:
    """Decide the whole release from the spec, the budget, the period and the input's declared
    schema; reads no rows. Every refusal (a typed error naming the field or column) happens
    here, before a caller reserves any budget.

    `engine` (polars or spark) overrides the spec's `engine:`; the default is polars.
    """
    engine = engine or resolved.spec.engine or "polars"
    loss = budget.required_loss()
    month = period_of(resolved.spec.period, period)
    allocation = allocate(resolved, loss, budget.change, budget.mechanism, budget.selection_delta)
    margins = margin_accuracy(resolved, allocation)
    check_input(data, resolved, allocation, month, engine)
    manifest = build_manifest(
        resolved,
        allocation,
        budget.change,
        None if month is None else str(month),
        engine,
        margins,
        noise_source_entry(default_noise_source()),
        budget.delta,
    )
    return PreparedRelease(data, resolved, budget, allocation, margins, month, engine, manifest)
