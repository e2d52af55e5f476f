"""The release of a wave's randomized answers: per cell (and margin row) and answer, the unbiased
count, its 95% margin, optionally projected onto nonnegative counts that sum to the respondents,
and each answer's share.

    prepared = prepare_local(spec, ledger=ledger)   # every check: spec, keys, the wave's record
    result = prepared.compute(data)                 # count reports → estimate → table, manifest
    write_local_files(result, out_dir)              # release.parquet, release.csv, manifest.json

Nothing is charged: the table is a function of ε-LDP reports (post-processing) and of the
public grouping columns. With a ledger the wave must be recorded there with the same
parameters, so no answers are released whose ε was never charged.
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from dprelease._version import version
from dprelease.errors import ConfigError, SpecError
from dprelease.ledger import Ledger
from dprelease.local._adapter import DataSource, key_structure
from dprelease.local._counts import (
    HASH_PATH,
    CellCounts,
    ReportColumns,
    describe_reports,
    polars_counts,
)
from dprelease.local._manifest import (
    GroupEntry,
    LevelEntry,
    LocalManifest,
    NotRecordedWave,
    SupportEntry,
    WaveCharge,
    WaveEntry,
)
from dprelease.local._spec import LocalReleaseSpec, LocalSpec
from dprelease.local._wave import recorded_wave
from dprelease.mechanism.randomized import (
    Z95,
    collision,
    debias,
    law_of,
    plug_in_variance,
    project,
)
from dprelease.publish import release_folder_problem, write_release_files
from dprelease.spec import LEVEL_COLUMN, ResolvedSpec

if TYPE_CHECKING:
    import pandas as pd

MECHANISM_NAMES = {
    "krr": "k-ary randomized response",
    "oue": "optimized unary encoding",
    "olh": "optimized local hashing",
}
RESPONDENTS, COUNT, SHARE, MOE = "respondents", "count", "share", "_moe95"
OUTPUTS = (RESPONDENTS, COUNT, COUNT + MOE, SHARE, SHARE + MOE, LEVEL_COLUMN)


@dataclass(frozen=True)
class LocalRelease:
    """A release of randomized answers: its table, its manifest, and the files written."""

    table: pl.DataFrame
    manifest: LocalManifest
    files: dict[str, Path] = field(default_factory=dict)

    @property
    def charged(self) -> bool:
        """Always False: the wave's ε was charged when its answers were given."""
        return False

    def to_pandas(self) -> pd.DataFrame:
        """The table as a pandas DataFrame (a share where no one answered is NaN there)."""
        return self.table.to_pandas()


@dataclass(frozen=True)
class _Estimates:
    """Per released row (cells, then each margin's rows) and answer."""

    respondents: np.ndarray
    count: np.ndarray
    moe: np.ndarray


def _levels(counts: CellCounts, structure: ResolvedSpec) -> tuple[np.ndarray, np.ndarray]:
    """Respondents and support counts of every released row: the cells, then each margin's rows
    (sums of their cells' counts: reports are counted once per row they fall in)."""
    if structure.levels is None:
        return counts.respondents, counts.support
    respondents, support = [], []
    for index, size in zip(structure.levels.index, structure.levels.sizes, strict=True):
        n = np.zeros(size, dtype=np.int64)
        np.add.at(n, index, counts.respondents)
        s = np.zeros((size, counts.support.shape[1]), dtype=np.int64)
        np.add.at(s, index, counts.support)
        respondents.append(n)
        support.append(s)
    return np.concatenate(respondents), np.concatenate(support)


@dataclass(frozen=True, eq=False)
class PreparedLocal:
    """A checked release of randomized answers: everything but the reports."""

    spec: LocalSpec
    release: LocalReleaseSpec
    structure: ResolvedSpec
    engine: str
    wave_charge: WaveCharge | NotRecordedWave

    def counts(self, data: DataSource) -> CellCounts:
        """Respondents and support counts per cell, on the chosen engine."""
        wave = self.spec.wave
        columns = ReportColumns(wave.spec.question, self.release.hash_column, wave.hash)
        if self.engine == "spark":
            from dprelease.local._spark import spark_counts

            return spark_counts(data, self.structure, columns, wave.randomizer)
        return polars_counts(data, self.structure, columns, wave.randomizer)

    def estimate(self, counts: CellCounts) -> _Estimates:
        """Unbiased counts, margins, and the projection if the spec asks for it."""
        respondents, support = _levels(counts, self.structure)
        law = law_of(self.spec.wave.randomizer)
        count = debias(support.astype(float), respondents, law)
        moe = Z95 * np.sqrt(plug_in_variance(count, respondents, law))
        if self.release.project:
            count, tau = project(count, respondents)
            moe = moe + np.abs(tau)[:, None]
        return _Estimates(respondents, count, moe)

    def compute(self, data: DataSource) -> LocalRelease:
        """Count the reports, estimate, and lay out the table with its manifest."""
        estimates = self.estimate(self.counts(data))
        return LocalRelease(self._table(estimates), self.manifest())

    def _table(self, e: _Estimates) -> pl.DataFrame:
        wave = self.spec.wave
        k = wave.randomizer.k
        keys = self.structure.released_keys
        rows = max(keys.height, 1)
        answers = pl.DataFrame({wave.spec.question: list(wave.randomizer.domain)}).with_row_index(
            ":j"
        )
        grid = keys.with_row_index(":r") if keys.width else pl.DataFrame({":r": [0]})
        table = grid.join(answers, how="cross", maintain_order="left_right")
        n = np.repeat(e.respondents, k)
        with np.errstate(divide="ignore", invalid="ignore"):
            share, share_moe = e.count.ravel() / n, e.moe.ravel() / n
        answered = n > 0
        table = table.drop(":r", ":j").with_columns(
            pl.Series(RESPONDENTS, n, dtype=pl.Int64),
            pl.Series(COUNT, e.count.ravel()),
            pl.Series(COUNT + MOE, e.moe.ravel()),
        )
        if self.release.shares:
            table = table.with_columns(
                pl.Series(SHARE, np.where(answered, share, np.nan)).fill_nan(None),
                pl.Series(SHARE + MOE, np.where(answered, share_moe, np.nan)).fill_nan(None),
            )
        assert table.height == rows * k
        return table

    def manifest(self) -> LocalManifest:
        """Everything the release states besides its table (a function of the spec)."""
        wave, release, structure = self.spec.wave, self.release, self.structure
        randomizer, law = wave.randomizer, law_of(wave.randomizer)
        declaration = wave.declaration()
        mechanism = MECHANISM_NAMES[randomizer.mechanism]
        eps = f"{float(randomizer.epsilon):g}"
        public = ", ".join(release.public_columns) or "none"
        levels = structure.levels
        return LocalManifest(
            release=release.name,
            source=release.source,
            spec_hash=self.spec_hash,
            created_at=datetime.now(UTC),
            library_version=version(),
            engine=self.engine,
            mechanism=f"{randomizer.mechanism} ({mechanism}, on the respondent's device)",
            guarantee=(
                f"each respondent's answer to {wave.spec.question!r} was randomized on their "
                f"device by {mechanism} with ε = {eps} before it was sent: whatever the answer, "
                f"every report was at most e^{eps} times as likely under it as under any other "
                "answer (ε-local differential privacy, against anyone, the agency included). "
                "This table is computed from those reports and the public columns only"
            ),
            not_protected=(
                "who answered, and their grouping columns: each row's respondents and the "
                f"columns {public} are published as they are (the spec declares them public); "
                "the local mechanism protects the answer only"
            ),
            wave=WaveEntry(
                id=wave.id,
                question=wave.spec.question,
                domain=list(randomizer.domain),  # type: ignore[arg-type]
                mechanism=randomizer.mechanism,
                epsilon=float(randomizer.epsilon),
                epsilon_exact=str(randomizer.epsilon),
                g=randomizer.g,
                randomizer_version=str(declaration["randomizer_version"]),
                scope=wave.spec.scope,
                wave_hash=wave.hash,
            ),
            budget=(
                f"post-processing of the randomized answers of wave {wave.id!r}: this release "
                f"charged nothing; the wave's ε = {eps} was charged to scope "
                f"{wave.spec.scope!r} when the wave was recorded, before its answers were given"
            ),
            wave_charge=self.wave_charge,
            support=SupportEntry(
                p=law.p,
                q=law.q,
                collision=None if randomizer.g is None else float(collision(randomizer.g)),
                support=_support_words(randomizer.mechanism),
            ),
            estimator="(C − n·q)/(p − q) per row and answer: C the reports that support the "
            "answer, n the row's respondents; unbiased",
            variance="(n_v·p(1 − p) + (n − n_v)·q(1 − q))/(p − q)², exact at the true count n_v",
            margin_of_error="1.96·√(the variance at the estimate, clipped to [0, n]): a 95% "
            "normal-approximation margin of the randomization's error (not of sampling error)"
            + ("; with the projection, plus the row's shift |τ|" if release.project else ""),
            projection=(
                "each row's counts projected onto nonnegative counts that sum to its "
                "respondents: max(estimate − τ, 0) with one τ per row; a margin row is projected "
                "from its own estimate, so it need not be the sum of its projected cells"
                if release.project
                else None
            ),
            shares=release.shares,
            group_by=[
                GroupEntry(columns=g.key_columns, keys=d.height, domain=g.domain_kind)
                for g, d in zip(release.group_by, structure.domains, strict=True)
            ],
            public_columns=list(release.public_columns),
            cells=structure.cells,
            levels=None
            if levels is None
            else [
                LevelEntry(level=levels.name(i), columns=list(levels.columns[i]), rows=size)
                for i, size in enumerate(levels.sizes)
            ],
            columns=self._columns(),
            missing="a null report is a respondent who did not answer the question: not "
            "counted in n",
            out_of_domain="rows whose keys are outside the public domains are dropped; a report "
            f"that is not {describe_reports(randomizer)} refuses the release",
        )

    @property
    def spec_hash(self) -> str:
        """Identity of the table: its release section, its keys and its wave's hash."""
        digest = hashlib.sha256(self.release.model_dump_json(exclude={"engine"}).encode())
        digest.update(self.structure.hash.encode())
        digest.update(self.spec.wave.hash.encode())
        return digest.hexdigest()

    def _columns(self) -> dict[str, str]:
        question = self.spec.wave.spec.question
        columns = {
            question: "the answer",
            RESPONDENTS: "the row's respondents (reports that are not null), published as they are",
            COUNT: "estimated number of respondents who gave the answer",
            COUNT + MOE: "95% margin of error of the count",
        }
        if self.release.shares:
            columns[SHARE] = "count / respondents (null where no one answered)"
            columns[SHARE + MOE] = "95% margin of error of the share"
        if self.structure.levels is not None:
            columns[LEVEL_COLUMN] = "the level: the cells, then each margin"
        return columns


def _support_words(mechanism: str) -> str:
    return {
        "krr": "the report is the answer",
        "oue": "the answer's bit is 1",
        "olh": "the report's hash maps the answer to its bucket",
    }[mechanism]


def prepare_local(
    spec: LocalSpec, *, ledger: Ledger | None = None, engine: str | None = None
) -> PreparedLocal:
    """Every check of a release of randomized answers, before any report is read: the release
    section, its public keys, the output columns, the engine, and (with a ledger) that the wave
    was recorded with these parameters."""
    release = spec.required_release()
    structure = key_structure(release, spec.base)
    question = spec.wave.spec.question
    for index, column in enumerate(release.key_columns):
        if column == question or column in OUTPUTS:
            raise SpecError(
                f"release.group_by[{index}]",
                f"group-by column {column!r} would repeat a column of the released table "
                f"({question}, {', '.join(OUTPUTS[:-1])}); rename it in the input",
            )
    if release.hash_column in (question, *release.key_columns):
        raise SpecError(
            HASH_PATH,
            f"{release.hash_column!r} is the answers' or a group-by column; each report's "
            "wave_hash arrives in a column of its own",
        )
    chosen = engine or release.engine or "polars"
    if chosen not in ("polars", "spark"):
        raise SpecError("engine", f"unknown engine {chosen!r}; choose one of polars, spark")
    charge: WaveCharge | NotRecordedWave = NotRecordedWave()
    if ledger is not None:
        stored = recorded_wave(spec.wave, ledger)
        charge = WaveCharge(
            scope=spec.wave.spec.scope,
            charge_id=stored.charge_id,
            wave_release_id=spec.wave.release_id,
        )
    return PreparedLocal(spec, release, structure, chosen, charge)


@dataclass(frozen=True)
class LocalFiles:
    """What a local release's files are made from (`publish.Publishable`): its table's parquet
    bytes and its manifest. A central release's come from the ledger's stored copy; a local one
    is charged nothing and so not stored, and its files are made from these once."""

    table_parquet: bytes
    manifest: dict[str, Any]

    @classmethod
    def of(cls, result: LocalRelease) -> LocalFiles:
        buffer = io.BytesIO()
        result.table.write_parquet(buffer, statistics=False)
        return cls(buffer.getvalue(), result.manifest.to_json_dict())


def check_out_dir(out_dir: Path) -> None:
    """ConfigError when the release cannot be published as the folder `out_dir` (checked
    before any report is read): the central path's rule (`release_folder_problem`)."""
    if (problem := release_folder_problem(out_dir)) is not None:
        raise ConfigError("out_dir", problem)


def write_local_files(result: LocalRelease, out_dir: Path) -> dict[str, Path]:
    """release.parquet, release.csv and manifest.json, published as the folder `out_dir`
    whole, as a central release's folder is (`publish.write_release_files`)."""
    return write_release_files(LocalFiles.of(result), out_dir)
