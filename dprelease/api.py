"""The Python API a dataframe user meets (`import dprelease as dp`; docs/guide.md).

    spec = dp.ReleaseSpec.from_yaml("visits.yaml")           # or dp.ReleaseSpec(name=..., ...)
                                                              # or a dict like `release:` in YAML
    dp.plan(spec, epsilon=0.5)                                # accuracy, before spending
    result = dp.release(df, spec, epsilon=0.5)                # exploration: nothing recorded
    result = dp.release(df, spec, epsilon=0.5, ledger="ledger.sqlite")  # charged, stored
    result = dp.release(df, "visits.yaml", privacy="privacy.yaml", ledger="ledger.sqlite")

Every call takes the one path the CLI and Dagster take (`dprelease.publish`: decide the budget,
prepare, then reserve → draw → commit); without a ledger nothing is recorded and the manifest
says so.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from dprelease.budget import PrivacyProfiles, load_privacy_profiles
from dprelease.errors import ConfigError, LedgerNotFound, SpecError
from dprelease.ledger import Ledger
from dprelease.loss import Amount, Measure, exact_positive, loss_text
from dprelease.mechanism import DataSource
from dprelease.publish import Budget, decide_budget, plan_budget, prepare, record_release
from dprelease.spec import ReleaseSpec, ResolvedSpec, load_spec, parse_local, parse_spec, resolve
from dprelease.statement import (
    LegacyManifest,
    Manifest,
    ReleasePlan,
    StatisticAccuracy,
    accuracy_of,
)

if TYPE_CHECKING:
    import pandas as pd

#: A spec, a mapping as the YAML's `release:` section, or the path of a spec file (whose
#: `publish:` section, if any, is read too).
SpecLike = ReleaseSpec | Mapping[str, Any] | str | Path
#: A privacy configuration, or the path of its YAML file.
PrivacyLike = PrivacyProfiles | str | Path

UNRECORDED = "not recorded in a ledger (exploration): nothing was charged; do not publish it"


@dataclass(frozen=True)
class ReleaseResult:
    """A release: its noisy table, its manifest, and what the ledger did (`status`)."""

    table: pl.DataFrame
    manifest: Manifest | LegacyManifest  # Legacy: a stored release of an earlier dprelease
    release_id: str | None  # the ledger slot (asset/period); None when nothing was recorded
    status: str  # in words: released and charged, stored copy returned, or not recorded
    charged: bool

    def to_pandas(self) -> pd.DataFrame:
        """The table as a pandas DataFrame (a mean's undefined cells are NaN there)."""
        return self.table.to_pandas()

    def __repr__(self) -> str:
        """What was released and what it spent, named by its measure (ρ for a zCDP release);
        the table and the manifest are attributes of their own."""
        manifest = self.manifest
        measure = getattr(manifest, "measure", Measure.PURE)
        total = getattr(manifest, "rho_total_exact", None) or manifest.epsilon_total_exact
        spent = "" if total is None else f"; {loss_text(measure, Fraction(total))}"
        shape = f"{self.table.height} rows × {self.table.width} columns"
        return f"ReleaseResult({self.status}{spent}; {shape})"

    def _repr_html_(self) -> str:
        """In a notebook: the same line, then the released table."""
        from html import escape

        return f"<p>{escape(repr(self))}</p>{self.table._repr_html_()}"

    @property
    def accuracy(self) -> list[StatisticAccuracy]:
        """Per statistic: ε spent, Δ, noise scale and 95% margin of error (as `dp.plan`)."""
        if isinstance(self.manifest, LegacyManifest):
            raise ConfigError(
                "manifest",
                "this release was stored by an earlier dprelease (manifest format 1); its "
                "accuracy is in result.manifest",
            )
        return accuracy_of(self.manifest.statistics)


def _resolved(spec: SpecLike) -> ResolvedSpec:
    if isinstance(spec, ReleaseSpec):
        return resolve(spec)
    if isinstance(spec, Mapping):  # errors name the field as in a spec file (release.…)
        if "wave" in spec:  # a local spec file's mapping: its wave's answers
            return parse_local(dict(spec))
        return parse_spec(dict(spec))
    if isinstance(spec, str | Path):
        return load_spec(spec)
    raise SpecError(
        "spec",
        f"got a {type(spec).__name__}: give a dp.ReleaseSpec, a dict like a spec file's "
        "`release:` section, or the path of a spec file (and the data first: "
        "dp.release(data, spec, ...))",
    )


def _privacy(privacy: PrivacyLike | None) -> PrivacyProfiles | None:
    if privacy is None or isinstance(privacy, PrivacyProfiles):
        return privacy
    return load_privacy_profiles(privacy)


@contextmanager
def _opened(ledger: Ledger | str | Path | None) -> Iterator[Ledger | None]:
    """The caller's ledger as it is, or an existing ledger by URL or path (never a new, empty
    one: a mistyped path must not look like a fresh budget; `dp.Ledger(url)` creates one),
    closed afterwards; None for none."""
    if ledger is None or isinstance(ledger, Ledger):
        yield ledger
        return
    try:
        opened = Ledger(ledger, mode="existing")
    except LedgerNotFound as exc:  # where it was looked for, then what to do in Python
        raise LedgerNotFound(
            f"{str(exc).split(';')[0]}; nothing was created. ledger= opens an existing ledger "
            "only, so that a mistyped path never reads as a fresh budget: pass "
            "ledger=dp.Ledger(path), which creates it, for the first release"
        ) from None
    with opened:
        yield opened


def _exact(value: Amount, field: str) -> Fraction:
    """An ε, ρ or cap given in Python as an exact rational; SpecError naming the keyword."""
    try:
        return exact_positive(value)
    except ValueError as exc:
        raise SpecError(field, f"{'ρ' if field == 'rho' else 'ε'} {exc}") from None


def _delta(value: Amount, field: str) -> Fraction:
    """A δ given in Python (1e-9, "1/1000000000", a Fraction) as an exact rational; SpecError
    naming the keyword unless 0 < δ < 1/2."""
    try:
        delta = exact_positive(value)
    except ValueError as exc:
        raise SpecError(field, f"δ {exc}") from None
    if delta >= Fraction(1, 2):
        raise SpecError(field, f"δ = {value} is not a small probability: give δ < 1/2, e.g. 1e-9")
    return delta


@dataclass(frozen=True)
class _Asked:
    """What a Python caller asked of the budget: exact amounts, a privacy YAML path."""

    epsilon: Amount | None
    rho: Amount | None
    cap: Amount | None
    privacy: PrivacyLike | None
    scope: str | None
    selection_delta: Amount | None = None

    def budget(
        self, resolved: ResolvedSpec, ledger: Ledger | None, *, require_loss: bool = True
    ) -> Budget:
        return decide_budget(
            resolved,
            scope=self.scope,
            privacy=_privacy(self.privacy),
            ledger=ledger,
            epsilon=None if self.epsilon is None else _exact(self.epsilon, "epsilon"),
            rho=None if self.rho is None else _exact(self.rho, "rho"),
            cap=None if self.cap is None else _exact(self.cap, "cap"),
            require_loss=require_loss,
            selection_delta=None
            if self.selection_delta is None
            else _delta(self.selection_delta, "selection_delta"),
        )


def release(
    data: DataSource,
    spec: SpecLike,
    *,
    epsilon: Amount | None = None,
    rho: Amount | None = None,
    privacy: PrivacyLike | None = None,
    ledger: Ledger | str | Path | None = None,
    scope: str | None = None,
    cap: Amount | None = None,
    period: str | None = None,
    force_new: bool = False,
    engine: str | None = None,
    selection_delta: Amount | None = None,
) -> ReleaseResult:
    """Release `spec` from `data` (pandas or polars DataFrame, polars LazyFrame, pyarrow Table,
    or a parquet/CSV path).

    The release spends `epsilon` (0.5, "1/12", a Fraction), or `rho` in a zCDP scope; without
    them, its share (the spec file's `publish.share`, default all) of its scope's cap: the
    ledger's, else `cap`, else the ε (or ρ_max) of the scope's odds risk profile in `privacy`
    (a privacy YAML or `PrivacyProfiles`).

    With `ledger` (a `dp.Ledger` or its URL/path) the release is charged to `scope` (default:
    the spec file's `publish.scope`, else the spec's name; a new scope is created with `cap` or
    the profile's ε) and stored; a slot (spec, period) already released returns its stored copy
    and charges nothing. Without a ledger nothing is recorded: for exploring inside the secure
    environment, never for publication. Everything that can be wrong with the spec, ε, period or
    the input's declared schema raises a typed error before any budget is touched.

    A spec whose group-by selects its keys from the data (`select: true`) spends δ as well:
    `selection_delta` (e.g. 1e-9), a budget of its own (docs/selection.md).
    """
    resolved = _resolved(spec)
    if ledger is None and (scope is not None or force_new):
        raise ConfigError("ledger", "scope and force_new need a ledger to charge")
    with _opened(ledger) as book:
        asked = _Asked(epsilon, rho, cap, privacy, scope, selection_delta)
        budget = asked.budget(resolved, book)
        prepared = prepare(data, resolved, budget, period=period, engine=engine)
        if book is None:
            drawn = prepared.draw()
            return ReleaseResult(drawn.table, drawn.manifest, None, UNRECORDED, charged=False)
        recorded = record_release(prepared, ledger=book, force_new=force_new)
    return ReleaseResult(
        recorded.table,
        recorded.manifest,
        recorded.release_id,
        f"{recorded.release_id}: {recorded.describe()}",
        recorded.charged,
    )


def plan(
    spec: SpecLike,
    epsilon: Amount | None = None,
    *,
    rho: Amount | None = None,
    privacy: PrivacyLike | None = None,
    ledger: Ledger | str | Path | None = None,
    scope: str | None = None,
    cap: Amount | None = None,
    targets: dict[str, float] | None = None,
    compare: bool = False,
    delta: float | None = None,
    releases: int | None = None,
    selection_delta: Amount | None = None,
) -> ReleasePlan:
    """What a release of `spec` will state per statistic (ε or ρ, Δ, scale, 95% margin of
    error; with margins each level's), without reading any data. Its loss is the one
    `dp.release` would spend with the same arguments; with `targets` (name → wanted margin of
    the released cells; default: the spec's `target_moe95`) also the smallest loss that meets
    them, planned at when no loss follows from the arguments. With `compare` (and `privacy`),
    `.comparison` gives the margins under pure ε with Laplace noise and under zCDP with
    Gaussian noise at the same odds profile (at `delta`, as one of `releases` releases)."""
    resolved = _resolved(spec)
    asked = _Asked(epsilon, rho, cap, privacy, scope, selection_delta)
    with _opened(ledger) as book:  # the planner asks for ε or targets in its own words
        budget = asked.budget(resolved, book, require_loss=False)
    return plan_budget(
        resolved, budget, targets=targets, compare=compare, delta=delta, releases=releases
    )
