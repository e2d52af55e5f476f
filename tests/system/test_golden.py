"""Golden outputs: every spec in the repository (the pipeline's, the guide's) and a set of variants
that reach every kind, mechanism, neighbour relation and post-processing path, released on the
demo data with a fixed test seed and a fixed bounding salt, must give the same bytes as the stored
ones: the released table (CSV, with its dtypes), the manifest (but for its time and version) and
the plan. A restructuring of the library must leave every output as it was.

tests/fixtures/golden/README.md says what is stored and when (and how) to write it again.
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import dprelease as dp
from dprelease.mechanism.noise import NoiseSource
from dprelease.publish import decide_budget, prepare
from dprelease.spec import load_spec

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "golden"
SPECS = GOLDEN / "specs"
INPUTS = GOLDEN / "inputs"
#: Set to write the outputs (and the inputs, if absent) instead of comparing them.
WRITE = os.environ.get("DPRELEASE_GOLDEN_WRITE") == "1"
SEED = 2027
SALT = 0x5EED_0F_B0_D1_E5
#: Manifest fields that say when and by which version a release was made, not what it is.
VARYING = ("created_at", "library_version")


@dataclass(frozen=True)
class Case:
    name: str
    spec: str  # a file in specs/
    data: str  # a file in inputs/
    epsilon: str | None = None
    rho: str | None = None
    period: str | None = None
    targets: dict[str, float] | None = None
    compare: bool = False  # plan under both measures with the privacy configuration
    spark: bool = True  # also a golden of the Spark engine

    def loss(self) -> dict[str, Fraction]:
        if self.rho is not None:
            return {"rho": Fraction(self.rho)}
        return {"epsilon": Fraction(self.epsilon or 1)}


CASES = [
    # the pipeline's specs (pipelines/specs), at their share of the example cap
    Case("case_control_by_genotype", "case_control_by_genotype.yaml", "case_control.parquet",
         "3/20", compare=True),
    Case("case_control_by_region", "case_control_by_region.yaml", "case_control.parquet", "3/20"),
    Case("visits_by_clinic", "visits_monthly.yaml", "visits.parquet", "1/12", period="2024-03"),
    # the guide's specs (docs/guide.md)
    Case("guide_satisfaction", "guide_satisfaction.yaml", "survey.parquet", "1",
         targets={"answers": 15, "income": 1_000_000}),
    Case("guide_with_totals", "guide_satisfaction_with_totals.yaml", "survey.parquet", "1"),
    Case("guide_quartiles", "guide_quartiles.yaml", "survey.parquet", "1"),
    Case("guide_nhanes", "guide_nhanes.yaml", "nhanes2.parquet", "1"),
    # variants: every kind, measure, mechanism, neighbour relation and post-processing path
    Case("visits_gaussian", "visits_gaussian.yaml", "visits.parquet", rho="1/200",
         period="2024-05"),
    Case("visits_laplace_zcdp", "visits_laplace_zcdp.yaml", "visits.parquet", rho="1/50",
         period="2024-07"),
    Case("visits_substitute", "visits_substitute.yaml", "visits.parquet", "1/3", period="2024-02"),
    Case("visits_margins", "visits_margins.yaml", "visits.parquet", "1/2", period="2024-03"),
    Case("visits_margins_gaussian", "visits_margins_gaussian.yaml", "visits.parquet",
         rho="1/20", period="2024-11"),
    Case("visits_quantiles", "visits_quantiles.yaml", "visits.parquet", "1", period="2024-06"),
    Case("visits_targets", "visits_targets.yaml", "visits.parquet", "1/4", period="2024-09",
         targets={"visits": 20, "total_cost": 20_000}),
    Case("survey_ungrouped", "survey_ungrouped.yaml", "survey.parquet", "1/2"),
    Case("nhanes_weighted", "nhanes_weighted.yaml", "nhanes2.parquet", "2"),
    Case("nhanes_weighted_csv", "nhanes_weighted.yaml", "nhanes2.csv", "2", spark=False),
    Case("nhanes_ratio", "nhanes_ratio.yaml", "nhanes2.parquet", "1"),
]  # fmt: skip


def _write_inputs() -> None:
    """The demo's tables (`pipelines.demo_data`, a smaller year of visits) and the guide's
    survey and NHANES extract, frozen here so a change of the generators changes no golden."""
    import numpy as np

    from pipelines.demo_data import generate_case_control, generate_visits

    INPUTS.mkdir(parents=True, exist_ok=True)
    generate_case_control().write_parquet(INPUTS / "case_control.parquet")
    generate_visits(n_patients=4_000).write_parquet(INPUTS / "visits.parquet")
    rng = np.random.default_rng(7)  # docs/guide.md, section 1
    answers = 6_000
    pl.DataFrame(
        {
            "person_id": rng.integers(0, 2_500, answers),
            "region": rng.choice(["north", "south", "east", "west"], answers),
            "satisfaction": rng.integers(1, 6, answers).astype(float),
            "income": rng.gamma(2.0, 15_000, answers),
        }
    ).write_parquet(INPUTS / "survey.parquet")
    text = (GOLDEN.parents[2] / "docs" / "data" / "nhanes2.csv").read_text()
    (INPUTS / "nhanes2.csv").write_text(text)
    pl.read_csv(INPUTS / "nhanes2.csv").write_parquet(INPUTS / "nhanes2.parquet")


@pytest.fixture(scope="module", autouse=True)
def _inputs() -> None:
    if WRITE and not INPUTS.exists():
        _write_inputs()


@pytest.fixture
def fixed_salt(monkeypatch: pytest.MonkeyPatch) -> None:
    """Which rows a unit keeps depends on a salt drawn from the OS CSPRNG per release; the
    golden fixes it, as the test seed fixes the noise."""
    monkeypatch.setattr(secrets, "randbits", lambda bits: SALT & ((1 << bits) - 1))


def _json(data: Any) -> str:
    return json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def _outputs(case: Case, engine: str) -> dict[str, str]:
    """What a release of the case states (table, its dtypes, manifest) and what its plan says."""
    resolved = load_spec(SPECS / case.spec)
    budget = decide_budget(resolved, **case.loss())
    prepared = prepare(INPUTS / case.data, resolved, budget, period=case.period, engine=engine)
    drawn = prepared.draw(NoiseSource.seeded_for_tests(SEED), allow_unsafe_noise=True)
    manifest = drawn.manifest.to_json_dict()
    for key in VARYING:
        del manifest[key]
    schema = {name: str(dtype) for name, dtype in drawn.table.schema.items()}
    outputs = {
        "table.csv": drawn.table.write_csv(),
        "manifest.json": _json({"schema": schema, "manifest": manifest}),
    }
    if engine == "polars":  # the plan reads no data: one engine states it
        privacy = SPECS / "privacy_case_control.yaml" if case.compare else None
        planned = dp.plan(
            SPECS / case.spec, targets=case.targets, privacy=privacy, compare=case.compare,
            **({} if case.compare else case.loss()),
        )  # fmt: skip
        outputs["plan.json"] = _json(planned.model_dump(mode="json"))
    return outputs


def _check(case: Case, engine: str) -> None:
    folder = GOLDEN / engine / case.name
    outputs = _outputs(case, engine)
    if WRITE:
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in outputs.items():
            (folder / name).write_text(text)
        return
    stored = sorted(p.name for p in folder.iterdir())
    assert stored == sorted(outputs), f"{folder}: stored {stored}, made {sorted(outputs)}"
    for name, text in outputs.items():
        assert text == (folder / name).read_text(), f"{case.name} ({engine}): {name} differs"


@pytest.mark.usefixtures("fixed_salt")
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_polars_engine_releases_what_it_released_before(case: Case) -> None:
    _check(case, "polars")


@pytest.mark.spark
@pytest.mark.usefixtures("fixed_salt")
@pytest.mark.parametrize("case", [c for c in CASES if c.spark], ids=lambda c: c.name)
def test_the_spark_engine_releases_what_it_released_before(case: Case) -> None:
    from sparktest import local_session

    local_session()  # local[2], as every Spark test
    _check(case, "spark")
