"""The pure release: data + spec + ε + noise source → noisy table + manifest.

`prepare` decides everything from the spec, ε and the input's declared schema without reading a
row (period, budget split, sensitivity, granularity, noise scales, with margins every level's
margins of error, the manifest), so every refusal happens before a ledger is charged;
`PreparedRelease.run` then reads the data, draws the noise and post-processes (with margins:
every level, made consistent, `dprelease.margins`), and nothing in it can fail because of a data
value. Nothing here knows about ledgers or files. PRIVACY.md states the rule this follows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import polars as pl

from dprelease import operator
from dprelease.accounting import Plan, plan_release
from dprelease.engines import DataSource, InputSummary, get_engine, new_salt
from dprelease.errors import SpecError
from dprelease.explain import build_manifest, with_outcome
from dprelease.margins import MarginPlan, plan_margins, release_levels, stacked_keys
from dprelease.mechanism.noise import (
    NoiseSource,
    default_noise_source,
    discrete_laplace,
    require_private,
)
from dprelease.operator import input_warnings
from dprelease.postprocess import columns, from_noisy
from dprelease.profile import Neighbours
from dprelease.rational import Epsilon, exact_positive
from dprelease.spec import (
    LoadedSpec,
    Month,
    ReleaseSpec,
    resolve_period,
)


def as_fraction(epsilon: Epsilon, field_name: str = "epsilon") -> Fraction:
    """ε as an exact rational (see `dprelease.rational`); errors name the field."""
    try:
        exact = exact_positive(epsilon)
        float(exact)  # the manifest states it as a float too
    except ValueError as exc:
        raise SpecError(field_name, f"ε {exc}") from None
    except OverflowError:
        raise SpecError(field_name, "ε is too large to state as a number") from None
    return exact


@dataclass(frozen=True)
class Release:
    """A finished release: the only two things that may be published, and the private input
    fingerprint the ledger keeps (never published)."""

    table: pl.DataFrame
    manifest: dict[str, Any]
    input_fingerprint: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class PreparedRelease:
    """A validated release waiting for its data and noise: everything it will publish but the
    noisy values is already decided (`manifest` lacks only the noise source, and with margins
    what a solver fallback would change: `Outcome`)."""

    data: DataSource
    loaded: LoadedSpec
    plan: Plan
    neighbours: Neighbours
    period: str | None
    month: Month | None
    spec_hash: str
    engine: str
    manifest: dict[str, Any]
    margins: MarginPlan | None = None

    def run(self, noise: NoiseSource | None = None, *, allow_unsafe_noise: bool = False) -> Release:
        """Aggregate exactly, add one batch of discrete Laplace noise per measurement (and
        level), then post-process; the batch size is the public grid (level) size, never a
        data value."""
        source = noise or default_noise_source()
        require_private(source, allow_unsafe=allow_unsafe_noise)
        engine = get_engine(self.engine)
        exact = engine.aggregate(self.data, self.loaded, self.plan, self.month, new_salt())
        for message in input_warnings(exact.summary, self.loaded.spec.name, self.period):
            operator.warn(message)
        post, manifest = self.loaded.spec.postprocess, self.manifest
        if self.margins is None:
            cells = self.loaded.cells
            noisy = {  # Int128, in units of m.granularity: cannot overflow (|Δ| ≤ 2^53 per row)
                m.name: exact.of(m) + pl.Series(discrete_laplace(m.scale_units, cells, source))
                for m in self.plan.measurements
            }
            measured = from_noisy(self.plan.measurements, noisy, post)
            keys = exact.keys
        else:
            measured, outcome = release_levels(exact, self.plan, self.margins, source)
            keys = stacked_keys(exact.keys, self.margins.levels)
            manifest = with_outcome(manifest, self.plan, post, self.margins, outcome)
        table = pl.DataFrame(
            [
                *keys.get_columns(),
                *(col for p in self.plan.statistics for col in columns(p, measured, post)),
            ]
        )
        noise_source = {
            "bits": source.bit_source,
            "seeded": source.is_seeded,
            "private": not source.is_seeded,
        }
        manifest = {**manifest, "noise_source": noise_source}
        return Release(table, manifest, exact.summary.fingerprint)

    def input_summary(self) -> InputSummary:
        """The private input summary alone (one pass over the input; no noise, no release):
        for a re-run whose stored release is returned, to tell whether the input changed."""
        return get_engine(self.engine).summarize(self.data, self.loaded, self.plan, self.month)


def spec_hash(loaded: LoadedSpec) -> str:
    """What a release slot was released from: the spec and its key domains, not ε (the ledger
    stores ε with the charge; a changed ε alone must not look like a changed spec)."""
    return loaded.hash()


def choose_neighbours(spec: ReleaseSpec, configured: Neighbours | None) -> Neighbours:
    """The spec's neighbour definition, else the privacy configuration's, else add/remove;
    SpecError when the two disagree."""
    if configured is not None and spec.neighbours not in (None, configured):
        raise SpecError(
            "release.neighbours",
            f"spec says {spec.neighbours.value} but the "
            f"privacy configuration says {configured.value}; make them agree",
        )
    return spec.neighbours or configured or Neighbours.ADD_REMOVE


def prepare(
    data: DataSource,
    loaded: LoadedSpec,
    epsilon: Epsilon,
    *,
    neighbours: Neighbours | None = None,
    period: str | None = None,
    engine: str | None = None,
) -> PreparedRelease:
    """Decide the whole release from spec, ε, period and the input's declared schema; reads no
    rows. Every refusal (a typed error naming the field or column) happens here, before a
    caller reserves any budget.

    `engine` (polars or spark) overrides the spec's `engine:`; the default is polars.
    """
    engine = engine or loaded.spec.engine or "polars"
    eps = as_fraction(epsilon)
    chosen = choose_neighbours(loaded.spec, neighbours)
    month = resolve_period(loaded.spec.period, period)
    plan = plan_release(loaded.spec, eps, chosen)
    margins = plan_margins(loaded, plan)
    get_engine(engine).check(data, loaded, plan, month)
    digest = spec_hash(loaded)
    manifest = build_manifest(loaded, plan, chosen, period, digest, engine, margins)
    return PreparedRelease(
        data, loaded, plan, chosen, period, month, digest, engine, manifest.to_json_dict(), margins
    )


def release(
    data: DataSource,
    loaded: LoadedSpec,
    epsilon: float | Fraction,
    *,
    neighbours: Neighbours | None = None,
    period: str | None = None,
    engine: str | None = None,
    noise: NoiseSource | None = None,
    allow_unsafe_noise: bool = False,
) -> Release:
    """One-shot release without a ledger (library use and tests); `publish` adds the ledger."""
    prepared = prepare(data, loaded, epsilon, neighbours=neighbours, period=period, engine=engine)
    return prepared.run(noise, allow_unsafe_noise=allow_unsafe_noise)
