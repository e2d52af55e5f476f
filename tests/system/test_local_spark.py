"""The Spark engine's translation of the row plan's `Reported` tallies counts exactly what the
polars engine counts: a release of randomized answers (`kind: randomized`) is the same table on
both, for every protocol, with keys outside the domain, missing answers, integer and text keys,
and margins; malformed and stale reports are refused on both."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from sparktest import local_session

import dprelease as dp
from dprelease.local import MalformedReports, ReportsOfAnotherConfiguration
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


def test_spark_counts_what_polars_counts_and_refuses_what_it_refuses(tmp_path: Path) -> None:
    """k-RR (the answers compared as the domain's type) and OLH (the hash with each report's
    seeds): the same table on both engines; a malformed OLH report and a stale seal refused."""
    local_session()
    for mechanism, wave in (("krr", {}), ("olh", {"g": 5})):
        path = tmp_path / f"{mechanism}.parquet"
        write_answers(path, mechanism, n=1_000, **wave)
        spec = local_spec(mechanism, **wave)
        on_polars = dp.release(str(path), spec, engine="polars").table
        on_spark = dp.release(str(path), spec, engine="spark").table
        assert on_spark.equals(on_polars)
        assert on_polars["answer_respondents"].max() > 0 and on_polars.height == 6 + 3 + 1
    bad = tmp_path / "bad.parquet"
    sealed = dp.local.load(local_spec("olh", g=5)).wave.hash
    pl.DataFrame(
        {"region": ["n"], "year": [2020], "answer": ["1:2"], "wave_hash": [sealed]}
    ).write_parquet(bad)
    with pytest.raises(MalformedReports):
        dp.release(str(bad), local_spec("olh", g=5), engine="spark")
    stale = tmp_path / "stale.parquet"
    write_answers(stale, "oue", n=200, stale=True)
    with pytest.raises(ReportsOfAnotherConfiguration):
        dp.release(str(stale), local_spec("oue"), engine="spark")
