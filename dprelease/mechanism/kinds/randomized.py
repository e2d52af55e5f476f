"""`randomized`: answers randomized on the respondent's device (local DP), de-biased per cell.

Its ε was spent when the answers were given (the wave's charge), so it spends nothing here and
makes no measurement: no noise is added. It asks the row plan for exact tallies of the reports
(`engines.Reported`): per cell the reports, the reports that support each answer, and the
reports that are malformed or carry another configuration's wave_hash, which refuse the release
(a malformed report may be an answer that was never randomized). Everything after is
post-processing of ε-LDP reports (`randomized` room): per row (cells, then each margin's rows,
whose tallies are their cells' sums) the unbiased count (C − n·q)/(p − q) of each answer, the
95% margin of its exact variance at the estimate, optionally the projection onto nonnegative
counts that sum to the row's respondents, and each answer's share.

With the projection a margin row is the sum of its projected cells (so margins add up, as a
central release's do) and its margin is the pooled estimate's plus what the projection moved
its cells: whenever the pooled estimate's interval covers the truth, so does this one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import polars as pl
from pydantic import Field

from dprelease import operator
from dprelease.errors import ConfigError, DataError, SpecError
from dprelease.loss import PrivacyLoss
from dprelease.mechanism.engines import ExactAggregates, Reported, Units
from dprelease.mechanism.kinds._kind import Allocated, Context, Kind, Prerequisite
from dprelease.mechanism.kinds._measurement import Measurement
from dprelease.mechanism.kinds._stated import EntryModel, ReleasedEntry, spent, spent_by
from dprelease.mechanism.margins import (
    MarginAccuracy,
    Measured,
    Outcome,
    places_of,
    round_to,
    rounded_counts,
    within,
)
from dprelease.mechanism.noise import NoiseSource
from dprelease.mechanism.randomized import (
    RANDOMIZER_VERSION,
    Z95,
    Randomizer,
    collision,
    debias,
    law_of,
    make_randomizer,
    plug_in_variance,
    project,
)
from dprelease.spec import (
    MOE95_SUFFIX,
    RESPONDENTS_SUFFIX,
    Levels,
    PostProcessing,
    RandomizedStatistic,
    StatisticKind,
)

#: A wave's slot in the ledger: `wave:<id>/-` (no release spec's name contains ':').
WAVE_PREFIX = "wave:"
MECHANISM_NAMES = {
    "krr": "k-ary randomized response",
    "oue": "optimized unary encoding",
    "olh": "optimized local hashing",
}
SUPPORT_WORDS = {
    "krr": "the report is the answer",
    "oue": "the answer's bit is 1",
    "olh": "the report's hash maps the answer to its bucket",
}


#: How a release of randomized answers is published (the entry's `margin_of_error` ends so).
ROUNDING = (
    "counts are published as integers (their truth is a count of respondents; 'decimals' "
    "applies to shares), with margins every margin row the sum of its rounded cells "
    "(controlled rounding), each margin then ⌈h + shift⌉ − 1 with shift the rounding's bound "
    "at that level (< 1); each answer's counts are rounded on their own, so a row's may sum "
    "to its respondents ± (k − 1); shares are rounded to the place of their margin's second "
    "significant digit per row (or 'decimals'), their margin plus half that place, rounded up"
)


class MalformedReports(DataError):
    """Reports that no randomizer of the wave gives: refused, never counted or dropped."""


class ReportsOfAnotherConfiguration(DataError):
    """Reports whose page was configured otherwise than the recorded wave (or says nothing)."""


def wave_slot(wave: str) -> str:
    """The ledger slot a wave's charge is recorded under."""
    return f"{WAVE_PREFIX}{wave}/-"


def describe_reports(randomizer: Randomizer) -> str:
    """What a report of `randomizer` looks like, in words."""
    if randomizer.mechanism == "krr":
        return f"one of its {randomizer.k} answers"
    if randomizer.mechanism == "oue":
        return f"{randomizer.k} characters 0 or 1"
    return f"'a:b:y' with 1 ≤ a < 2^31 − 1, 0 ≤ b < 2^31 − 1, 0 ≤ y < {randomizer.g}"


class WaveEntry(EntryModel):
    """The wave the answers were collected in: what every respondent's device did."""

    id: str
    question: str = Field(description="the column of randomized reports")
    domain: list[str] | list[int] | list[bool]
    mechanism: Literal["krr", "oue", "olh"]
    epsilon: float
    epsilon_exact: str
    g: int | None = Field(description="OLH: the buckets; None for k-RR and OUE")
    randomizer_version: str
    wave_hash: str
    wave_release_id: str = Field(description="the ledger slot of the wave's charge")


class RandomizedEntry(ReleasedEntry):
    """Answers randomized on the device, de-biased: post-processing, charged nothing."""

    kind: Literal["randomized"]
    column: str
    wave: WaveEntry
    guarantee: str
    not_protected: str
    charged: str
    p: float = Field(description="P(a report supports the respondent's own answer)")
    q: float = Field(description="P(a report supports any other answer)")
    collision: float | None = Field(
        default=None, description="OLH: P(two answers share a bucket), exact over the hash family"
    )
    support: str = Field(description="when a report supports an answer")
    estimator: str
    variance: str
    margin_of_error: str
    projection: str | None = Field(description="None: the unbiased estimates as they are")
    respondents: str
    shares: bool
    missing: str
    refused: str

    def accuracy(
        self, by_name: Mapping[str, ReleasedEntry], targets: Mapping[str, float]
    ) -> dict[str, Any]:
        """What the planner states: it spends nothing and adds no noise (Δ 0, no scale); its
        margins depend on each row's respondents (`dp.local.plan` states them for n)."""
        return {
            **spent_by(self),
            "sensitivity": 0.0,
            "derivation": self.charged,
            "scale": None,
            "moe95": None,
        }


@dataclass(frozen=True)
class Tallies:
    """Exact tallies of the reports per cell: respondents n and support counts (cells × k)."""

    respondents: np.ndarray
    support: np.ndarray


@dataclass(frozen=True)
class RandomizedAllocation(Allocated):
    statistic: RandomizedStatistic
    randomizer: Randomizer
    wave_hash: str
    levels: Levels | None

    def _name(self, what: str) -> str:
        return f"{self.statistic.name}:{what}"

    def tallies(self) -> list[Units]:
        """The exact sums it reads (no noise: the reports are ε-LDP already): per cell the
        reports, the reports supporting each answer, the malformed and the stale ones."""
        stat, r = self.statistic, self.randomizer

        def tally(what: str, term: Reported) -> Units:
            return Units(self._name(what), (term,), 1.0, 0, 1)

        stale = Reported(stat.column, r, "stale", hash_column=stat.hash_column,
                         expected=self.wave_hash)  # fmt: skip
        return [
            tally("answered", Reported(stat.column, r, "answered")),
            *(tally(f"supports{j}", Reported(stat.column, r, "supports", j)) for j in range(r.k)),
            tally("malformed", Reported(stat.column, r, "malformed")),
            tally("stale", stale),
        ]

    def prerequisites(self) -> list[Prerequisite]:
        return [Prerequisite(wave_slot(self.statistic.wave), self.wave_hash,
                             f"wave {self.statistic.wave!r}")]  # fmt: skip

    def select(self, exact: ExactAggregates, cells: int, source: NoiseSource) -> Tallies:
        """The tallies, after refusing malformed reports and reports of another configuration
        (no value and no count in the refusal: the operator channel gets the count)."""
        stat = self.statistic

        def of(what: str) -> np.ndarray:
            return exact.values[self._name(what)].cast(pl.Int64).to_numpy()

        stale = int(of("stale").sum())
        if stale:
            operator.warn(
                f"column {stat.hash_column!r}: {stale} report(s) carry no or another wave_hash"
            )
            raise ReportsOfAnotherConfiguration(
                f"column {stat.hash_column!r} holds reports made under another questionnaire "
                f"configuration than wave_hash {self.wave_hash[:12]}… (or none), so nothing was "
                "released: they may have another ε than the wave's charge. Serve the "
                "configuration `dprelease local wave` printed, and remove those reports by their "
                "submission metadata (the operator log says how many)"
            )
        bad = int(of("malformed").sum())
        if bad:
            mechanism = self.randomizer.mechanism
            operator.warn(
                f"column {stat.column!r}: {bad} report(s) are not {mechanism} reports of this wave"
            )
            raise MalformedReports(
                f"column {stat.column!r} holds reports that are not {mechanism} reports of this "
                f"wave ({describe_reports(self.randomizer)}); a malformed report may be an "
                "answer that was never randomized, so nothing was released. Check that the "
                "answers come from this wave's questionnaire, and remove those rows by their "
                "submission metadata, never by value (the operator log says how many)"
            )
        support = np.stack([of(f"supports{j}") for j in range(self.randomizer.k)], axis=1)
        return Tallies(of("answered"), support)

    def estimates(self, tallies: Tallies) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per released row (the cells, then each margin's rows): respondents, counts and their
        95% margins (see the module for the projection's margin rows)."""
        law = law_of(self.randomizer)
        n, support = tallies.respondents, tallies.support
        index = (np.arange(len(n)),) if self.levels is None else self.levels.index
        sizes = (len(n),) if self.levels is None else self.levels.sizes
        rows_n, rows_count, rows_moe = [], [], []
        cells_est = debias(support.astype(float), n, law)
        cells_proj, tau = project(cells_est, n) if self.statistic.project else (cells_est, None)
        for level, (at, size) in enumerate(zip(index, sizes, strict=True)):
            pooled_n = np.zeros(size, dtype=np.int64)
            np.add.at(pooled_n, at, n)
            pooled_support = np.zeros((size, support.shape[1]), dtype=np.int64)
            np.add.at(pooled_support, at, support)
            estimate = debias(pooled_support.astype(float), pooled_n, law)
            moe = Z95 * np.sqrt(plug_in_variance(estimate, pooled_n, law))
            if tau is not None:
                if level == 0:
                    estimate, moe = cells_proj, moe + np.abs(tau)[:, None]
                else:  # the sum of its projected cells, within the pooled margin plus the moves
                    estimate = np.zeros_like(estimate)
                    np.add.at(estimate, at, cells_proj)
                    moved = np.zeros_like(moe)
                    np.add.at(moved, at, np.abs(cells_proj - cells_est))
                    moe = moe + moved
            rows_n.append(pooled_n)
            rows_count.append(estimate)
            rows_moe.append(moe)
        return np.concatenate(rows_n), np.concatenate(rows_count), np.concatenate(rows_moe)

    def columns(
        self, released: Mapping[str, Measured], selected: Any, post: PostProcessing
    ) -> list[pl.Series]:
        """The row's respondents; each answer's count as an integer (its truth is a count of
        respondents; with margins every margin row stays the sum of its cells) and its margin,
        widened by the rounding's move; each share rounded as a central share is, its margin
        widened by half its place (`ROUNDING`)."""
        stat = self.statistic
        n, count, moe = self.estimates(selected)
        out = [pl.Series(f"{stat.name}{RESPONDENTS_SUFFIX}", n, dtype=pl.Int64)]
        outcome = Outcome()
        for j, column in enumerate(stat.value_columns()):
            counts, margin = rounded_counts(count[:, j], moe[:, j], self.levels, column, outcome)
            out.append(pl.Series(column, counts, dtype=pl.Int64))
            if post.moe95_columns:
                out.append(pl.Series(column + MOE95_SUFFIX, margin, dtype=pl.Float64))
        for fallback in outcome.fallbacks:  # a solver's failure on these values: never silent
            operator.warn(fallback)
        answered = n > 0
        with np.errstate(divide="ignore", invalid="ignore"):
            for j, column in enumerate(stat.share_columns()):
                share, margin = rounded_shares(
                    np.where(answered, count[:, j] / n, np.nan),
                    np.where(answered, moe[:, j] / n, np.nan),
                    post,
                )
                out.append(pl.Series(column, share, dtype=pl.Float64).fill_nan(None))
                if post.moe95_columns:
                    out.append(
                        pl.Series(column + MOE95_SUFFIX, margin, dtype=pl.Float64).fill_nan(None)
                    )
        return out

    def entry(
        self, post: PostProcessing, margins: MarginAccuracy | None, outcome: Outcome | None
    ) -> RandomizedEntry:
        stat, r = self.statistic, self.randomizer
        law = law_of(r)
        name = MECHANISM_NAMES[r.mechanism]
        eps = f"{float(r.epsilon):g}"
        margins_text = (
            "; a margin row is the sum of its projected cells, its margin the pooled "
            "estimate's plus the sum of what the projection moved its cells"
            if stat.project and self.levels is not None
            else ""
        )
        return RandomizedEntry(
            name=stat.name,
            kind="randomized",
            **spent(self.loss),
            mechanism=f"{r.mechanism} ({name}, on the respondent's device): no noise is added "
            "at release",
            column=stat.column,
            wave=WaveEntry(
                id=stat.wave,
                question=stat.column,
                domain=list(r.domain),  # type: ignore[arg-type]
                mechanism=r.mechanism,
                epsilon=float(r.epsilon),
                epsilon_exact=str(r.epsilon),
                g=r.g,
                randomizer_version=RANDOMIZER_VERSION,
                wave_hash=self.wave_hash,
                wave_release_id=wave_slot(stat.wave),
            ),
            guarantee=f"each respondent's answer to {stat.column!r} was randomized on their "
            f"device by {name} with ε = {eps} before it was sent: whatever the answer, every "
            f"report was at most e^{eps} times as likely under it as under any other answer "
            "(ε-local differential privacy, against anyone, the agency included); the values "
            "are computed from those reports and the public key columns only",
            not_protected="who answered, and their key columns: each row's respondents "
            f"({stat.name}{RESPONDENTS_SUFFIX}) and the group-by columns are published as "
            "they are; the local mechanism protects the answer only",
            charged=f"nothing: post-processing of the randomized answers of wave "
            f"{stat.wave!r}, whose ε = {eps} was charged to its scope when the wave was "
            f"recorded ({wave_slot(stat.wave)}), before its answers were given",
            p=law.p,
            q=law.q,
            collision=None if r.g is None else float(collision(r.g)),
            support=SUPPORT_WORDS[r.mechanism],
            estimator="(C − n·q)/(p − q) per row and answer: C the reports that support the "
            "answer, n the row's respondents (a margin row's: the sums over its cells); "
            "unbiased, and a margin row's estimate is the sum of its cells'",
            variance="(n_v·p(1 − p) + (n − n_v)·q(1 − q))/(p − q)², exact at the true count n_v",
            margin_of_error="1.96·√(the variance at the estimate, clipped to [0, n]): a 95% "
            "normal-approximation margin of the randomization's error (not of sampling error)"
            + ("; with the projection, a cell's plus its shift |τ|" if stat.project else "")
            + margins_text
            + "; "
            + ROUNDING,
            projection="each cell's counts projected onto nonnegative counts that sum to its "
            "respondents: max(estimate − τ, 0) with one τ per cell"
            if stat.project
            else None,
            respondents=f"{stat.name}{RESPONDENTS_SUFFIX}: the row's reports that are not null, "
            "published as they are",
            shares=stat.shares,
            missing="a null report is a respondent who did not answer: not counted in n",
            refused=f"a report that is not {describe_reports(r)}, or whose "
            f"{stat.hash_column!r} is not the wave's wave_hash, refuses the release",
        )


def rounded_shares(
    share: np.ndarray, moe: np.ndarray, post: PostProcessing
) -> tuple[np.ndarray, np.ndarray]:
    """Shares rounded as a central share is: to the place of their margin's second significant
    digit per row (or `decimals`), within [0, 1]; the margin adds the half place the rounding
    may move a share, rounded up, and is at most the distance to the farther bound."""
    places = places_of(post, np.minimum(moe, 1.0))
    value = within(share, places, 0.0, 1.0)
    half = np.where(np.isfinite(places), 0.5 / 10.0 ** np.nan_to_num(places), 0.0)
    reach = round_to(np.maximum(value, 1.0 - value), places, up=True, decimal=True)
    return value, np.minimum(round_to(moe + half, places, up=True), reach)


def _randomizer(stat: RandomizedStatistic, path: str) -> Randomizer:
    """The wave's randomizer; SpecError at the statistic's field it refuses (`g`: OLH's buckets,
    round(e^ε) + 1 unless given, must stay below 2^31 − 1)."""
    try:
        return make_randomizer(
            list(stat.domain), stat.epsilon, stat.mechanism, g=stat.g, compact=stat.compact
        )
    except ConfigError as exc:
        raise SpecError(f"{path}.{exc.path}", exc.message) from None


class RandomizedKind(Kind):
    names = (StatisticKind.RANDOMIZED.value,)
    model = RandomizedStatistic
    entry = RandomizedEntry

    def spends(self, stat: Any, resolved: Any) -> bool:
        return False

    def no_target(self, stat: RandomizedStatistic) -> str:
        return (
            f"{stat.name!r} is randomized on the device: its margins depend on the respondents "
            "and its ε is the wave's (dp.local.plan states them)"
        )

    def allocate(
        self,
        stat: RandomizedStatistic,
        share: PrivacyLoss,
        ctx: Context,
        owned: Mapping[str, Measurement],
        path: str,
    ) -> RandomizedAllocation:
        randomizer = _randomizer(stat, path)
        sealed = randomizer.config(wave=stat.wave, question=stat.column)["wave_hash"]
        return RandomizedAllocation(stat, share, randomizer, str(sealed), ctx.resolved.levels)
