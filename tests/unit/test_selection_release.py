"""Key selection through a release: the keys are selected first (a DP output), then every
statistic is measured over the selected keys only; the manifest states the selection and nothing
about keys that were not selected; refusals come before anything is read or charged."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import polars as pl
import pytest
import yaml

import dprelease as dp
from dprelease.errors import SpecError
from dprelease.mechanism import allocate
from dprelease.mechanism.engines import EngineJob, get_engine
from dprelease.mechanism.noise import NoiseSource
from dprelease.publish import decide_budget, prepare
from dprelease.spec import parse_spec

#: Keys held by many units (certain to be released at ε = 1, δ = 1e-9: τ = 40 units) and keys
#: held by one unit each (released with probability ≤ δ each).
COMMON = {"A00": 400, "B11": 250, "C22": 120}
LONE = [f"Z{i:02d}" for i in range(30)]


def visits(lone: list[str] = LONE) -> pd.DataFrame:
    rows: list[tuple[int, str, str]] = []
    person = 0
    for code, units in COMMON.items():
        for _ in range(units):
            rows += [(person, code, "north"), (person, code, "south")]
            person += 1
    for code in lone:
        rows.append((person, code, "north"))
        person += 1
    return pd.DataFrame(rows, columns=["person", "dx", "region"])


def spec(**domain: Any) -> dict[str, Any]:
    return {
        "name": "dx_counts",
        "source": "visits",
        "privacy_unit": "person",
        "max_groups_per_unit": 2,
        "max_rows_per_unit": 2,
        "group_by": [
            {"column": "region", "domain": {"values": ["north", "south"]}},
            {"column": "dx", "domain": {"select": True, **domain}},
        ],
        "statistics": [{"kind": "count", "name": "visits"}],
    }


def drawn(data: pd.DataFrame, seed: int, epsilon: str = "1", **domain: Any) -> Any:
    resolved = parse_spec(spec(**domain))
    budget = decide_budget(resolved, epsilon=Fraction(epsilon))
    budget = budget.__class__(**{**budget.__dict__, "selection_delta": Fraction(1, 10**9)})
    prepared = prepare(data, resolved, budget)
    return prepared.draw(NoiseSource.seeded_for_tests(seed), allow_unsafe_noise=True)


def test_dp_release_on_pandas_releases_the_selected_keys_only() -> None:
    result = dp.release(visits(), spec(), epsilon=1, selection_delta=1e-9)
    table = result.table
    assert sorted(set(table["dx"].to_list())) == sorted(COMMON)  # no lone key, every common one
    assert table.height == 2 * len(COMMON)  # the public regions × the selected keys
    for code, units in COMMON.items():
        north = table.filter((pl.col("dx") == code) & (pl.col("region") == "north"))
        assert abs(north["visits"].item() - units) < 60  # a count with Laplace noise, b = 2
    manifest = result.manifest
    assert [g.domain for g in manifest.group_by] == ["values", "select"]
    assert manifest.group_by[1].keys == len(COMMON) and manifest.cells == 2 * len(COMMON)
    (entry,) = manifest.selections or []
    assert (entry.columns, entry.mechanism, entry.delta_spent_exact) == (
        ["dx"],
        "optimal",
        "1/1000000000",
    )
    # the selection's share and the count's add up to the release's ε (weights 1 and 1)
    assert Fraction(entry.share_exact) + Fraction(manifest.statistics[0].epsilon_exact) == 1
    assert manifest.selection_delta == 1e-9


def test_always_keys_are_released_and_an_empty_selection_is_a_normal_release() -> None:
    """Review requirement 2: no candidate passing is no refusal (that would leak)."""
    lone_only = visits()
    lone_only = lone_only[lone_only["dx"].str.startswith("Z")]
    result = drawn(lone_only, seed=3, always=["A00"])
    assert result.table["dx"].to_list() == ["A00", "A00"]
    assert result.manifest.group_by[1].keys == 1
    nothing = drawn(lone_only, seed=4)
    assert nothing.table.height == 0 and nothing.manifest.cells == 0
    assert nothing.table.columns == ["region", "dx", "visits", "visits_moe95"]


def test_the_manifest_says_nothing_of_keys_not_selected() -> None:
    """Two inputs that differ only in keys a single unit holds (not released): the manifests
    are the same, so nothing in them counts or names the candidates."""

    def stated(data: pd.DataFrame) -> dict[str, Any]:
        manifest = drawn(data, seed=5).manifest.to_json_dict()
        del manifest["created_at"]
        return manifest

    assert stated(visits(LONE)) == stated(visits(LONE[:2]))
    text = json.dumps(stated(visits(LONE)))
    assert "Z0" not in text and "candidate" not in text


def test_keys_are_selected_first_then_measured_over_the_selected_grid() -> None:
    """With seeded noise, the release is the selection drawn from the distinct units per key
    (every unit holds one key here, so the salt does not matter) and then the count's noise over
    the grid of the selected keys, in that order."""
    data = visits()
    result = drawn(data, seed=11)
    resolved = parse_spec(spec())
    allocation = allocate(
        resolved,
        dp.PrivacyLoss.pure(Fraction(1)),
        dp.ProtectedChange.ADD_REMOVE,
        selection_delta=Fraction(1, 10**9),
    )
    job = EngineJob(data, resolved, allocation, None)
    candidates, units = get_engine("polars").distinct_units(job, job.plan.selections[0], salt=1)
    assert candidates["dx"].to_list() == sorted([*COMMON, *LONE])
    assert units[:, 0].tolist() == [*COMMON.values(), *([1] * len(LONE))]
    source = NoiseSource.seeded_for_tests(11)
    keep = allocation.selections[0].plan.select(units, source)
    kept = sorted(np.array(candidates["dx"].to_list())[keep].tolist())
    assert sorted(set(result.table["dx"].to_list())) == kept
    noise = allocation.measurements[0].levels[0].draw(2 * len(kept), source)
    exact = [units_ for code in kept for units_ in [COMMON[code]]] * 2
    assert result.table["visits"].to_list() == [
        e + int(n) for e, n in zip(exact, noise, strict=True)
    ]


def test_without_a_delta_the_release_is_refused_in_one_line_before_reading() -> None:
    with pytest.raises(SpecError) as caught:
        dp.release("/nonexistent.parquet", spec(), epsilon=1)
    message = str(caught.value)
    assert message.startswith("release.group_by[1].domain: select: true spends δ")
    assert "selection_delta" in message and "\n" not in message


def test_accuracy_targets_with_selection_are_refused() -> None:
    targeted = spec()
    targeted["statistics"] = [{"kind": "count", "name": "visits", "target_moe95": 10}]
    with pytest.raises(SpecError, match=r"release.group_by\[1\].domain: .*weights instead"):
        dp.release(visits(), targeted, epsilon=1, selection_delta=1e-9)


@pytest.mark.spark
def test_the_spark_engine_selects_as_the_polars_engine_does(tmp_path: Path) -> None:
    """The same units per key from both engines (every unit holds one key here, so the engines'
    different hashes cannot differ), and a release on Spark shows the common keys only."""
    from sparktest import local_session

    from dprelease.mechanism.engines.spark import SparkEngine

    data = tmp_path / "visits.parquet"
    pl.from_pandas(visits()).write_parquet(data)
    resolved = parse_spec(spec(always=["B11"]))
    allocation = allocate(
        resolved,
        dp.PrivacyLoss.pure(Fraction(1)),
        dp.ProtectedChange.ADD_REMOVE,
        selection_delta=Fraction(1, 10**9),
    )
    job = EngineJob(str(data), resolved, allocation, None)
    (term,) = job.plan.selections
    on_spark = SparkEngine(local_session())
    on_spark.check(job)
    polars_keys, polars_units = get_engine("polars").distinct_units(job, term, salt=5)
    spark_keys, spark_units = on_spark.distinct_units(job, term, salt=5)
    assert spark_keys.equals(polars_keys) and (spark_units == polars_units).all()
    assert "B11" not in spark_keys["dx"].to_list()  # an always key is no candidate
    budget = decide_budget(resolved, epsilon=Fraction(1))
    budget = budget.__class__(**{**budget.__dict__, "selection_delta": Fraction(1, 10**9)})
    prepared = prepare(str(data), resolved, budget, engine="spark")
    released = prepared.draw(NoiseSource.seeded_for_tests(3), allow_unsafe_noise=True)
    assert sorted(set(released.table["dx"].to_list())) == sorted(COMMON)
    assert released.manifest.engine == "spark"


def test_the_cli_plans_and_releases_a_selecting_spec(tmp_path: Path) -> None:
    from helpers import invoke_cli, one_line_error, words

    visits().to_csv(tmp_path / "visits.csv", index=False)
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump({"release": spec()}))
    common = ["--spec", str(tmp_path / "spec.yaml")]
    planned = invoke_cli("plan", *common, "--epsilon", "1", "--selection-delta", "1e-9")
    assert planned.exit_code == 0, planned.output
    said = words(planned.output)
    assert "keys of dx selected from the data: optimal" in said and "τ = 40 units" in said
    assert "δ spent = 1e-09 of the scope's selection δ = 1e-09" in said
    release = [*common, "--data", str(tmp_path / "visits.csv"), "--epsilon", "1", "--cap", "2"]
    release += ["--ledger", str(tmp_path / "ledger.sqlite")]
    refused = invoke_cli("release", *release, "--out", str(tmp_path / "refused"))
    one_line_error(refused, "release.group_by[1].domain", "selection_delta")
    assert not (tmp_path / "refused").exists() and not (tmp_path / "ledger.sqlite").exists()
    out = tmp_path / "out"
    result = invoke_cli("release", *release, "--selection-delta", "1e-9", "--out", str(out))
    assert result.exit_code == 0, result.output
    table = pl.read_csv(out / "release.csv")
    assert sorted(set(table["dx"].to_list())) == sorted(COMMON)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["selections"][0]["delta_spent_exact"] == "1/2000000000"
    assert manifest["group_by"][1] == {"columns": ["dx"], "keys": 3, "domain": "select"}
