"""The Spark engine of local releases counts exactly what the polars engine counts: for every
protocol, with keys outside the domain, missing answers, integer and text keys, and margins."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from sparktest import local_session

import dprelease as dp
from dprelease.local._counts import MalformedReports, ReportsOfAnotherConfiguration
from dprelease.mechanism.noise import NoiseSource

pytestmark = pytest.mark.spark

DOMAIN = ["never", "once", "monthly", "weekly", "daily"]


def local_spec(mechanism: str, **wave: Any) -> dict[str, Any]:
    return {
        "wave": {
            "id": "w",
            "question": "answer",
            "domain": DOMAIN,
            "epsilon": "3/2",
            "scope": "s",
            "mechanism": mechanism,
            **wave,
        },  # fmt: skip
        "release": {
            "name": "answers_by_area",
            "source": "answers",
            "group_by": [
                {"column": "region", "domain": {"values": ["n", "s", "e"]}},
                {"column": "year", "domain": {"min": 2020, "max": 2021}},
            ],
            "margins": [["region"], []],
            "public_columns": ["region", "year"],
        },
    }


def write_answers(
    path: Path, mechanism: str, n: int = 3_000, stale: bool = False, **wave: Any
) -> None:
    """Reports of n respondents, sealed with the wave's hash (`stale`: every 7th another's)."""
    rng = np.random.default_rng(5)
    answers = [DOMAIN[i] for i in rng.integers(0, len(DOMAIN), n)]
    reports = dp.local.randomize(
        answers, domain=DOMAIN, epsilon="3/2", mechanism=mechanism,  # type: ignore[arg-type]
        g=wave.get("g"), source=NoiseSource.seeded_for_tests(9), allow_unsafe_noise=True,
    )  # fmt: skip
    frame = pl.DataFrame(
        {
            "region": rng.choice(["n", "s", "e", "w", None], n).tolist(),
            "year": rng.integers(2019, 2023, n),
            "answer": [None if i % 23 == 0 else r for i, r in enumerate(reports)],
            "wave_hash": [dp.local.load(local_spec(mechanism, **wave)).wave.hash] * n,
        }
    )
    if stale:
        frame = frame.with_columns(
            pl.when(pl.int_range(pl.len()) % 7 == 1).then(pl.lit("0" * 64))
            .otherwise("wave_hash").alias("wave_hash")
        )  # fmt: skip
    frame.write_parquet(path)


@pytest.mark.parametrize(("mechanism", "wave"), [("krr", {}), ("oue", {}), ("olh", {"g": 5})])
def test_spark_counts_what_polars_counts(tmp_path: Path, mechanism: str, wave: dict) -> None:
    local_session()
    path = tmp_path / "answers.parquet"
    write_answers(path, mechanism, **wave)
    spec = local_spec(mechanism, **wave)
    on_polars = dp.local.release(str(path), spec, engine="polars").table
    on_spark = dp.local.release(str(path), spec, engine="spark").table
    assert on_spark.equals(on_polars)
    assert on_polars["respondents"].max() > 0


def test_spark_refuses_malformed_reports(tmp_path: Path) -> None:
    local_session()
    path = tmp_path / "answers.parquet"
    sealed = dp.local.load(local_spec("olh", g=5)).wave.hash
    pl.DataFrame(
        {"region": ["n"], "year": [2020], "answer": ["1:2"], "wave_hash": [sealed]}
    ).write_parquet(path)
    with pytest.raises(MalformedReports):
        dp.local.release(str(path), local_spec("olh", g=5), engine="spark")


@pytest.mark.parametrize("mechanism", ["krr", "oue"])
def test_spark_refuses_reports_of_another_configuration(tmp_path: Path, mechanism: str) -> None:
    local_session()
    path = tmp_path / "answers.parquet"
    write_answers(path, mechanism, n=200, stale=True)
    for engine in ("polars", "spark"):
        with pytest.raises(ReportsOfAnotherConfiguration):
            dp.local.release(str(path), local_spec(mechanism), engine=engine)
