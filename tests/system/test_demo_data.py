"""Tests for the deterministic demo data generator."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from pipelines import demo_data as dd


@pytest.fixture(scope="module")
def visits() -> pl.DataFrame:
    """The full demo table, generated once: every test here reads or writes this one copy."""
    return dd.generate_visits()


@pytest.fixture
def generated_once(monkeypatch: pytest.MonkeyPatch, visits: pl.DataFrame) -> None:
    """`write_demo_data` writes the module's copy instead of generating the table again."""
    monkeypatch.setattr(dd, "generate_visits", lambda: visits)


@pytest.fixture(scope="module")
def case_control() -> pl.DataFrame:
    return dd.generate_case_control()


def test_case_control_is_deterministic(case_control: pl.DataFrame) -> None:
    assert_frame_equal(dd.generate_case_control(), case_control)
    assert not dd.generate_case_control(seed=1).equals(case_control)


def test_visits_is_deterministic() -> None:
    """Determinism does not depend on the size, so a small table shows it."""
    small = dd.generate_visits(seed=7, n_patients=500)
    assert_frame_equal(dd.generate_visits(seed=7, n_patients=500), small)
    assert not dd.generate_visits(seed=8, n_patients=500).equals(small)


def test_case_control_exact_counts_and_schema(case_control: pl.DataFrame) -> None:
    assert case_control.height == 1095 == dd.N_PARTICIPANTS
    counts = dict(case_control["case_status"].value_counts().iter_rows())
    assert counts == {"case": 547, "control": 548}
    assert case_control["participant_id"].n_unique() == 1095
    assert case_control.schema == pl.Schema(
        {
            "participant_id": pl.Int64,
            "region": pl.String,
            "sex": pl.String,
            "age_band": pl.String,
            "genotype": pl.Int8,
            "case_status": pl.String,
        }
    )
    assert case_control.null_count().sum_horizontal().item() == 0


def test_case_control_domains(case_control: pl.DataFrame) -> None:
    assert set(case_control["region"]) <= set(dd.REGIONS)
    assert dd.EMPTY_CASE_CONTROL_REGION not in set(case_control["region"])
    assert set(case_control["sex"]) == set(dd.SEXES)
    assert set(case_control["age_band"]) == set(dd.AGE_BANDS)
    assert set(case_control["genotype"]) == set(dd.GENOTYPES)
    assert set(case_control["case_status"]) == set(dd.CASE_STATUSES)


def test_cases_carry_more_risk_alleles(case_control: pl.DataFrame) -> None:
    means = dict(case_control.group_by("case_status").agg(pl.col("genotype").mean()).iter_rows())
    assert means["case"] > means["control"] + 0.2


def test_visits_schema_and_size(visits: pl.DataFrame) -> None:
    assert visits.schema == pl.Schema(
        {
            "patient_id": pl.Int64,
            "visit_date": pl.Date,
            "region": pl.String,
            "clinic": pl.String,
            "cost": pl.Float64,
            "length_of_stay": pl.Int64,
        }
    )
    assert 980_000 <= visits.height <= 1_020_000
    assert visits["visit_date"].is_sorted()
    assert visits["visit_date"].min() == date(2024, 1, 1)
    assert visits["visit_date"].max() == date(2024, 12, 31)
    months = visits["visit_date"].dt.strftime("%Y-%m").unique().sort().to_list()
    assert tuple(months) == dd.MONTHS


def test_visits_domains_except_intentional_rows(visits: pl.DataFrame) -> None:
    keys = dd.clinic_keys()
    assert keys.height == len(dd.CLINICS) == 32
    unknown = visits.filter(pl.col("clinic") == dd.OUT_OF_DOMAIN_CLINIC)
    null_region = visits.filter(pl.col("region").is_null())
    assert unknown.height == 25
    assert null_region.height == 12
    clean = visits.filter(pl.col("region").is_not_null(), pl.col("clinic") != "UNKNOWN")
    assert clean.height == visits.height - 37
    # every remaining row is a valid public (region, clinic) pair
    assert clean.join(keys, on=["region", "clinic"], how="anti").height == 0
    seen = set(clean["clinic"])
    assert dd.EMPTY_CLINIC not in seen
    assert seen == set(dd.CLINICS) - {dd.EMPTY_CLINIC}
    assert 0 < clean.filter(pl.col("clinic") == dd.RARE_CLINIC).height < 100


def test_visits_values(visits: pl.DataFrame) -> None:
    assert visits["cost"].min() > 0
    assert visits["cost"].max() > 250_000  # extreme outliers exist, so clamping matters
    assert visits["cost"].median() < 1_000
    los = visits["length_of_stay"]
    assert los.min() == 0
    assert (los > 30).sum() > 0


def test_patients_recur_across_months(visits: pl.DataFrame) -> None:
    per_patient = visits.group_by("patient_id").agg(
        pl.col("visit_date").dt.month().n_unique().alias("months"),
        pl.col("region").drop_nulls().n_unique().alias("regions"),
    )
    assert per_patient.height == 120_000
    assert (per_patient["months"] >= 2).mean() > 0.8
    assert per_patient["regions"].max() == 1  # one home region per patient
    jan = set(visits.filter(pl.col("visit_date").dt.month() == 1)["patient_id"])
    feb = set(visits.filter(pl.col("visit_date").dt.month() == 2)["patient_id"])
    assert len(jan & feb) > 10_000


@pytest.mark.usefixtures("generated_once")
def test_write_demo_data_is_idempotent(tmp_path: Path) -> None:
    paths = dd.write_demo_data(tmp_path / "store")
    assert set(paths) == {"case_control", "visits"}
    assert paths["case_control"].name == "case_control.parquet"
    assert paths["visits"].name == "visits.parquet"
    mtimes = {k: p.stat().st_mtime_ns for k, p in paths.items()}
    assert dd.write_demo_data(tmp_path / "store") == paths
    assert {k: p.stat().st_mtime_ns for k, p in paths.items()} == mtimes
    assert_frame_equal(pl.read_parquet(paths["case_control"]), dd.generate_case_control())
    assert pl.scan_parquet(paths["visits"]).select(pl.len()).collect().item() > 980_000
    assert sorted(p.name for p in (tmp_path / "store").iterdir()) == [
        "case_control.parquet",
        "visits.parquet",
    ]


@pytest.mark.usefixtures("generated_once")
def test_write_demo_data_overwrite(tmp_path: Path) -> None:
    path = tmp_path / "case_control.parquet"
    path.write_bytes(b"not parquet")
    dd.write_demo_data(tmp_path)
    assert path.read_bytes() == b"not parquet"  # left alone without overwrite
    dd.write_demo_data(tmp_path, overwrite=True)
    assert_frame_equal(pl.read_parquet(path), dd.generate_case_control())
