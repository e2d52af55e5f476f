"""Waves and releases of randomized answers, through the faces users take (`dp.local` and
`dp.release` on polars and pandas, the `dprelease local` and `dprelease release` commands): the
wave's ε charged once before collection, the release a central one (`kind: randomized`, the
central manifest and margins) charged nothing, exact support counts for every protocol,
refusals at their YAML path before any report is read."""

from __future__ import annotations

import json
import logging
import math
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from helpers import ROOT, invoke_cli, one_line_error

import dprelease as dp
from dprelease.budget import load_privacy_profiles
from dprelease.change import PrivacyUnit
from dprelease.errors import (
    BudgetExhausted,
    ConfigError,
    NeighboursMismatch,
    SchemaError,
    SpecChanged,
    SpecError,
)
from dprelease.ledger import ScopeTerms
from dprelease.local import MalformedReports, ReportsOfAnotherConfiguration, WaveNotRecorded
from dprelease.loss import Measure
from dprelease.mechanism.noise import NoiseSource
from dprelease.mechanism.randomized._estimators import law_of
from dprelease.mechanism.randomized._randomizers import olh_hash

WAVE = {
    "id": "drug-use-2025-05",
    "question": "drug_use",
    "domain": ["never", "once", "monthly", "weekly"],
    "epsilon": 1,
    "scope": "respondents",
}
RELEASE = {
    "name": "drug_use_by_region",
    "source": "answers",
    "group_by": [{"column": "region", "domain": {"values": ["n", "s"]}}],
    "public_columns": ["region"],
}


def spec(wave: dict[str, Any] | None = None, **release: Any) -> dict[str, Any]:
    return {"wave": {**WAVE, **(wave or {})}, "release": {**RELEASE, **release}}


def write_spec(directory: Path, data: dict[str, Any]) -> Path:
    import yaml

    path = directory / "drug_use.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def reports(mechanism: str = "krr", n: int = 400, seed: int = 1, **wave: Any) -> pl.DataFrame:
    """Randomized answers of n respondents in regions n and s, with a few outside the domain
    (region x) and a few who did not answer (null)."""
    domain = wave.get("domain", WAVE["domain"])
    rng = np.random.default_rng(seed)
    answers = [domain[i] for i in rng.integers(0, len(domain), n)]
    randomized = dp.local.randomize(
        answers,
        domain=domain,
        epsilon=wave.get("epsilon", 1),
        mechanism=mechanism,  # type: ignore[arg-type]
        g=wave.get("g"),
        source=NoiseSource.seeded_for_tests(seed),
        allow_unsafe_noise=True,
    )
    regions = ["n", "s", "x", "n", "s"]
    stated = {key: value for key, value in wave.items() if value is not None}
    sealed = dp.local.load(spec({**stated, "mechanism": mechanism})).wave.hash
    frame = pl.DataFrame(
        {
            "region": [regions[i % 5] for i in range(n)],
            "drug_use": randomized,
            "wave_hash": [sealed] * n,  # the page posts its configuration's with every report
        },
        schema={"region": pl.String, "drug_use": pl.String, "wave_hash": pl.String},
    )
    return frame.with_columns(
        pl.when(pl.int_range(pl.len()) % 37 == 0).then(None).otherwise(pl.col("drug_use"))
        .alias("drug_use")
    )  # fmt: skip


def ledger(tmp_path: Path) -> dp.Ledger:
    return dp.Ledger(str(tmp_path / "ledger.sqlite"))


def brute_force_support(frame: pl.DataFrame, local: dp.local.LocalSpec) -> dict[str, list[int]]:
    """Per region, how many reports support each answer, computed report by report."""
    randomizer = local.wave.randomizer
    out = {}
    for region in ("n", "s"):
        rows = frame.filter((pl.col("region") == region) & pl.col("drug_use").is_not_null())
        support = [0] * randomizer.k
        for report in rows["drug_use"]:
            for j, answer in enumerate(randomizer.domain):
                if randomizer.mechanism == "krr":
                    support[j] += report == answer
                elif randomizer.mechanism == "oue":
                    support[j] += report[j] == "1"
                else:
                    a, b, y = map(int, report.split(":"))
                    assert randomizer.g is not None
                    support[j] += olh_hash(a, b, j, randomizer.g) == y
        out[region] = support
    return out


# -- waves --------------------------------------------------------------------------------------


def test_a_wave_is_charged_once_and_the_same_question_again_is_a_new_charge(
    ledger_url: str,
) -> None:
    """On SQLite and PostgreSQL (the `ledger_url` fixture)."""
    book = dp.Ledger(ledger_url)
    first = dp.local.record_wave(spec(), ledger=book, cap=3)
    assert first.charged and first.epsilon == 1 and first.new_scope
    again = dp.local.record_wave(spec(), ledger=book, cap=3)
    assert not again.charged and again.charge_id == first.charge_id
    assert book.status("respondents")[0].spent == 1
    later = dp.local.record_wave(spec({"id": "drug-use-2025-11"}), ledger=book)
    assert later.charged and book.status("respondents")[0].spent == 2
    with pytest.raises(BudgetExhausted):
        dp.local.record_wave(spec({"id": "drug-use-2026-05", "epsilon": 2}), ledger=book)
    assert book.status("respondents")[0].spent == 2


def test_a_recorded_wave_cannot_change_its_questionnaire(tmp_path: Path) -> None:
    book = ledger(tmp_path)
    dp.local.record_wave(spec(), ledger=book, cap=3)
    with pytest.raises(SpecChanged, match="new wave id"):
        dp.local.record_wave(spec({"epsilon": 2}), ledger=book)
    assert book.status("respondents")[0].spent == 1


def test_a_new_scope_needs_a_cap_that_holds_the_wave(tmp_path: Path) -> None:
    book = ledger(tmp_path)
    with pytest.raises(ConfigError, match="is new: give its lifetime cap"):
        dp.local.record_wave(spec(), ledger=book)
    with pytest.raises(BudgetExhausted):
        dp.local.record_wave(spec(), ledger=book, cap="1/2")
    assert book.status() == []  # no scope was opened by a refused wave
    recorded = dp.local.record_wave(
        spec({"epsilon": "0.25"}), ledger=book, privacy=ROOT / "pipelines" / "privacy.yaml"
    )
    assert recorded.cap == Fraction(3, 10)  # the default profile's cap


# -- releases -----------------------------------------------------------------------------------


CENTRAL = {
    "name": "respondents_by_region",
    "source": "people",
    "group_by": [{"column": "region", "domain": {"values": ["n", "s"]}}],
    "statistics": [{"name": "people", "kind": "count"}],
}
PEOPLE = pl.DataFrame({"region": ["n", "s", "n"]})


def test_a_wave_keeps_its_terms_and_never_shares_a_scope_with_central_releases(
    tmp_path: Path,
) -> None:
    """A wave publishes who answered (each cell's respondents): its scope keeps `answer`
    neighbours for life, and neither a central release (whose add/remove or substitute guarantee
    hides who is in the data) nor a wave enters the other's scope; nothing is charged."""
    book = ledger(tmp_path)
    dp.local.record_wave(spec(), ledger=book, cap=3)
    status = book.status("respondents")[0]
    assert status.terms == ScopeTerms(
        "sequential", Measure.PURE, None, dp.ProtectedChange.ANSWER, PrivacyUnit(None), None
    )
    with pytest.raises(NeighboursMismatch, match="holds local-DP waves") as refused:
        dp.release(PEOPLE, CENTRAL, epsilon="1/2", ledger=book, scope="respondents")
    assert "\n" not in str(refused.value)
    dp.release(PEOPLE, CENTRAL, epsilon="1/2", ledger=book, scope="people", cap=2)
    with pytest.raises(NeighboursMismatch, match="record waves in a scope of their own"):
        dp.local.record_wave(spec({"id": "other", "scope": "people"}), ledger=book)
    assert book.status("respondents")[0].spent == 1
    assert book.status("people")[0].spent == Fraction(1, 2)


def test_no_central_spec_or_profile_states_a_waves_neighbours(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="answer is a local wave's neighbours") as refused:
        dp.release(PEOPLE, {**CENTRAL, "neighbours": "answer"}, epsilon=1)
    assert refused.value.path == "release.neighbours" and "\n" not in str(refused.value)
    config = tmp_path / "privacy.yaml"
    config.write_text("privacy:\n  neighbours: answer\n  profile: {kind: constant, bound: 3}\n")
    with pytest.raises(ConfigError, match="answer is a local wave's neighbours") as refused:
        load_privacy_profiles(config)
    assert refused.value.path == "privacy.neighbours"


ANSWERS = WAVE["domain"]


def counts(table: pl.DataFrame) -> pl.DataFrame:
    """The released counts, one column per answer."""
    return table.select(f"drug_use_{a}" for a in ANSWERS)


@pytest.mark.parametrize(
    ("mechanism", "wave"),
    [("krr", {}), ("oue", {"mechanism": "oue"}), ("olh", {"mechanism": "olh", "g": 3})],
)
def test_a_release_estimates_from_the_exact_support_counts_and_charges_nothing(
    tmp_path: Path, mechanism: str, wave: dict[str, Any]
) -> None:
    data = reports(mechanism, g=wave.get("g"))
    local = spec(wave, project=False)
    book = ledger(tmp_path)
    dp.local.record_wave(local, ledger=book, cap=2)
    result = dp.release(data, local, ledger=book)
    assert not result.charged and book.status("respondents")[0].spent == 1
    assert "charged nothing" in result.status
    loaded = dp.local.load(local)
    law = law_of(loaded.wave.randomizer)
    support = brute_force_support(data, loaded)
    for region in ("n", "s"):
        row = result.table.filter(pl.col("region") == region)
        n = row["drug_use_respondents"][0]
        assert (
            n == data.filter((pl.col("region") == region) & pl.col("drug_use").is_not_null()).height
        )
        expected = [(c - n * law.q) / law.gap for c in support[region]]
        assert counts(row).row(0) == tuple(round(e) for e in expected)  # published as integers
        for a, e in zip(ANSWERS, expected, strict=True):  # to the place of the share's margin
            share, margin = row[f"drug_use_{a}_share"][0], row[f"drug_use_{a}_share_moe95"][0]
            place = 1 - math.floor(math.log10(margin))
            assert share == pytest.approx(round(e / n, place), abs=1e-12)
    manifest = result.manifest.to_json_dict()  # the central manifest, as manifest.json holds it
    assert manifest["format"] == "dprelease-manifest/2" and manifest["neighbours"] == "answer"
    assert manifest["epsilon_total_exact"] == "0" and "post-processing" in manifest["guarantee"]
    assert manifest["ledger"]["recorded"] is True and manifest["ledger"]["scope"] == "respondents"
    [entry] = manifest["statistics"]
    assert entry["kind"] == "randomized" and entry["charged"].startswith("nothing")
    assert entry["wave"]["mechanism"] == mechanism and entry["mechanism"].startswith(mechanism)
    assert entry["wave"]["wave_release_id"] == "wave:drug-use-2025-05/-"
    assert entry["wave"]["wave_hash"] == loaded.wave.hash
    again = dp.release(data, local, ledger=book)  # the slot's stored copy, byte for byte
    assert again.table.equals(result.table) and book.status("respondents")[0].spent == 1


def test_dp_release_on_pandas_releases_what_polars_releases() -> None:
    """The notebook path: reports randomized from a pandas column (its missing answers NaN or
    NA), released from a pandas DataFrame, read back with to_pandas: as from polars."""
    import pandas as pd

    frame = reports("oue").to_pandas()
    local = spec({"mechanism": "oue"})
    from_pandas = dp.release(frame, local)
    assert counts(from_pandas.table).equals(counts(dp.release(reports("oue"), local).table))
    table = from_pandas.to_pandas()
    assert list(table.columns[:3]) == ["region", "drug_use_respondents", "drug_use_never"]
    assert len(table) == 2 and table["drug_use_respondents"].dtype == "int64"
    answers = pd.Series(["never", "weekly", None] * 10)  # None is NaN in a pandas column
    randomized = dp.local.randomize(
        answers, domain=WAVE["domain"], epsilon=1, mechanism="oue",
        source=NoiseSource.seeded_for_tests(2), allow_unsafe_noise=True,
    )  # fmt: skip
    assert randomized[2::3] == [None] * 10  # a missing answer stays missing
    assert all(len(r) == 4 for r in randomized if r is not None)  # type: ignore[arg-type]
    numbers = pd.Series([1, None, 0], dtype="Int64")  # pandas' NA
    assert dp.local.randomize(numbers, domain=[0, 1], epsilon=1)[1] is None


def test_csv_and_parquet_inputs_give_the_same_release(tmp_path: Path) -> None:
    data = reports("krr")
    data.write_csv(tmp_path / "answers.csv")
    data.write_parquet(tmp_path / "answers.parquet")
    local = spec()
    from_csv = dp.release(tmp_path / "answers.csv", local).table
    from_parquet = dp.release(tmp_path / "answers.parquet", local).table
    assert counts(from_csv).equals(counts(from_parquet))


def test_margins_add_up_with_and_without_the_projection() -> None:
    """As a central release's margins: each margin row is the sum of its cells. Without the
    projection its estimate is the pooled reports' (linear, so the sum); with it, the sum of
    the projected cells, nonnegative, summing to the row's respondents, its margin the pooled
    estimate's plus what the projection moved its cells."""
    data = reports("oue", n=300)
    for project in (False, True):
        table = dp.release(data, spec({"mechanism": "oue"}, margins=[[]], project=project)).table
        cells = table.filter(pl.col("level") == "region")
        total = table.filter(pl.col("level") == "total")
        assert total["drug_use_respondents"][0] == cells["drug_use_respondents"].sum()
        assert counts(total).row(0) == counts(cells).sum().row(0)  # integers, still additive
        if project:  # each count rounded on its own: a row's sum within k − 1 of its respondents
            assert (counts(table).min_horizontal() >= 0).all()
            gap = counts(table).sum_horizontal() - table["drug_use_respondents"]
            assert (gap.abs() <= len(ANSWERS) - 1).all()
            unprojected = dp.release(data, spec({"mechanism": "oue"}, margins=[[]], project=False))
            pooled = unprojected.table.filter(pl.col("level") == "total")
            moved = counts(cells) - counts(unprojected.table.filter(pl.col("level") == "region"))
            for a in ANSWERS:
                column = f"drug_use_{a}_moe95"
                expected = pooled[column][0] + moved[f"drug_use_{a}"].abs().sum()
                # both rounded: each margin within its own rounding's shift (< 1 a row)
                assert abs(total[column][0] - expected) <= 2 + 2 * cells.height


def test_a_release_without_a_ledger_says_it_is_not_recorded() -> None:
    result = dp.release(reports(), spec())
    assert result.manifest.ledger.recorded is False and not result.charged


def test_a_release_of_an_unrecorded_wave_is_refused_before_reading_any_report(
    tmp_path: Path,
) -> None:
    book = ledger(tmp_path)
    missing = tmp_path / "no-such-answers.parquet"
    reports().write_parquet(missing)
    with pytest.raises(WaveNotRecorded, match="record the wave first"):
        dp.release(missing, spec(), ledger=book)
    dp.local.record_wave(spec({"id": "other-wave"}), ledger=book, cap=2)
    with pytest.raises(WaveNotRecorded, match="record the wave before collecting"):
        dp.release(missing, spec(), ledger=book)
    dp.local.record_wave(spec(), ledger=book, cap=2)
    with pytest.raises(WaveNotRecorded, match="other parameters"):
        dp.release(missing, spec({"domain": ["never", "once", "often"]}), ledger=book)
    dp.local.record_wave(spec({"id": "elsewhere", "scope": "others"}), ledger=book, cap=2)
    with pytest.raises(WaveNotRecorded, match="charged to budget scope 'others'"):
        dp.release(missing, spec({"id": "elsewhere"}), ledger=book)
    assert [s.spent for s in book.status()] == [1, 2]  # nothing charged by the refusals
    assert book.stored_release("drug_use_by_region/-") is None


def test_malformed_reports_refuse_the_release_without_showing_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A report no randomizer of the wave gives may be an answer never randomized: refused; the
    message names the column, not the value; the operator channel gets the count."""
    data = reports("krr").with_columns(
        pl.when(pl.int_range(pl.len()) == 3).then(pl.lit("sometimes")).otherwise("drug_use")
        .alias("drug_use")
    )  # fmt: skip
    with (
        caplog.at_level(logging.WARNING, logger="dprelease.operator"),
        pytest.raises(MalformedReports) as refused,
    ):
        dp.release(data, spec())
    assert "sometimes" not in str(refused.value) and "'drug_use'" in str(refused.value)
    assert "1 report(s)" in caplog.text
    bits = reports("oue").with_columns(pl.lit("0101x").alias("drug_use"))
    with pytest.raises(MalformedReports):
        dp.release(bits, spec({"mechanism": "oue"}))
    seeds = reports("olh", g=3).with_columns(pl.lit("0:1:2").alias("drug_use"))  # a = 0
    with pytest.raises(MalformedReports):
        dp.release(seeds, spec({"mechanism": "olh", "g": 3}))


def test_reports_made_under_another_configuration_refuse_the_release(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Each report carries its page's wave_hash: a page configured at another ε (or a stale
    snippet, or none) made reports the wave's charge and estimator are not about; refused,
    naming the column, never a value; the operator channel gets the count (review L2)."""
    other = dp.local.load(spec({"epsilon": "1/2"})).wave.config()
    assert other["wave_hash"] != dp.local.load(spec()).wave.hash
    data = reports().with_columns(
        pl.when(pl.int_range(pl.len()) == 5).then(pl.lit(other["wave_hash"]))
        .otherwise("wave_hash").alias("wave_hash")
    )  # fmt: skip
    with (
        caplog.at_level(logging.WARNING, logger="dprelease.operator"),
        pytest.raises(ReportsOfAnotherConfiguration, match="'wave_hash' holds reports made") as e,
    ):
        dp.release(data, spec())
    assert str(other["wave_hash"]) not in str(e.value) and "1 report(s)" in caplog.text
    unsealed = reports("oue").with_columns(pl.lit(None, pl.String).alias("wave_hash"))
    with pytest.raises(ReportsOfAnotherConfiguration):
        dp.release(unsealed, spec({"mechanism": "oue"}))
    with pytest.raises(SchemaError, match="column 'sealed'"):
        dp.release(reports(), spec(hash_column="sealed"))
    renamed = reports().rename({"wave_hash": "sealed"})
    assert dp.release(renamed, spec(hash_column="sealed")).table.height == 2


@pytest.mark.parametrize(
    ("data", "path", "words"),
    [
        (spec({"epsilon": 0}), "wave.epsilon", "> 0"),
        (spec({"id": "Drug-Use"}), "wave.id", "pattern"),
        (spec({"domain": ["a", "a"]}), "wave.domain", "twice"),
        (spec({"g": 4}), "wave.g", "olh"),
        (spec(public_columns=[]), "release.public_columns", "protects only"),
        (spec(public_columns=["region", "age"]), "release.public_columns", "not a group-by"),
        (
            spec(
                group_by=[{"column": "drug_use_once", "domain": {"values": [1]}}],
                public_columns=["drug_use_once"],
            ),
            "release",
            "repeat",
        ),  # fmt: skip
        (spec(margins=[["region"]]), "release.margins[0]", "all the group-by columns"),
        (spec(hash_column="drug_use"), "release.hash_column", "a column of its own"),
        (spec(statistics=[]), "release.statistics", "one statistic named after the question"),
        ({**spec(), "publish": {"scope": "x"}}, "publish.scope", "released in its scope"),
        (
            spec(privacy_unit="person", max_rows_per_unit=1),
            "release.privacy_unit",
            "no privacy unit",
        ),
    ],
)
def test_a_bad_spec_is_refused_at_its_yaml_path(data: dict, path: str, words: str) -> None:
    with pytest.raises(SpecError) as refused:
        dp.release(pl.DataFrame({"region": ["n"], "drug_use": ["once"]}), data)
    assert refused.value.path == path and words in refused.value.message


def test_a_randomized_statistic_is_released_alone() -> None:
    """Randomized answers spend nothing in a scope that protects one answer: a spec mixing them
    with a statistic of confidential rows is refused, naming the statistic."""
    mixed = {
        "name": "mixed",
        "source": "answers",
        "statistics": [
            {"name": "people", "kind": "count"},
            {
                "name": "drug_use",
                "kind": "randomized",
                "column": "drug_use",
                "wave": WAVE["id"],
                "domain": ANSWERS,
                "epsilon": 1,
            },
        ],  # fmt: skip
    }
    with pytest.raises(SpecError, match="cannot hold 'people'") as refused:
        dp.release(pl.DataFrame({"drug_use": ["once"]}), mixed)
    assert refused.value.path == "release.statistics[1]"
    with pytest.raises(ConfigError, match="spends nothing"):
        dp.release(reports(), spec(), epsilon=1)


def test_the_answers_column_must_hold_reports(tmp_path: Path) -> None:
    sealed = pl.lit(dp.local.load(spec()).wave.hash).alias("wave_hash")
    with pytest.raises(SchemaError, match=r"wave.question: column 'drug_use'"):
        dp.release(pl.DataFrame({"region": ["n"], "drug_use": [1.5]}).with_columns(sealed), spec())
    with pytest.raises(SchemaError, match="'drug_use': not found"):
        dp.release(pl.DataFrame({"region": ["n"]}).with_columns(sealed), spec())
    with pytest.raises(SchemaError, match="'wave_hash': not found"):
        dp.release(pl.DataFrame({"region": ["n"], "drug_use": ["once"]}), spec())


def test_the_nhanes_race_question_under_local_dp() -> None:
    """A real survey column end to end: NHANES II's race by region, randomized by k-RR at ε = 1
    (seeded), released with margins: every estimate within its margin of the true count here
    (15 rows; each is covered with probability about 95%, so this seed shows all of them)."""
    nhanes = pl.read_csv(ROOT / "docs" / "data" / "nhanes2.csv")
    randomized = dp.local.randomize(
        nhanes["race"].to_list(), domain=[1, 2, 3], epsilon=1,
        source=NoiseSource.seeded_for_tests(3), allow_unsafe_noise=True,
    )  # fmt: skip
    local = {
        "wave": {
            "id": "nhanes-race",
            "question": "race",
            "domain": [1, 2, 3],
            "epsilon": 1,
            "scope": "nhanes",
        },  # fmt: skip
        "release": {
            "name": "race_by_region",
            "source": "nhanes",
            "group_by": [{"column": "region", "domain": {"min": 1, "max": 4}}],
            "margins": [[]],
            "public_columns": ["region"],
            "project": False,
        },
    }
    data = nhanes.select("region").with_columns(
        pl.Series("race", randomized), wave_hash=pl.lit(dp.local.load(local).wave.hash)
    )
    table = dp.release(data, local).table
    truth = nhanes.group_by("region", "race").len().pivot("race", index="region", values="len")
    cells = table.filter(pl.col("level") == "region").join(truth, on="region", how="left")
    assert cells.height == 4
    for race in ("1", "2", "3"):
        error = (cells[f"race_{race}"] - cells[race]).abs()
        assert (error <= cells[f"race_{race}_moe95"]).all()
    total = table.filter(pl.col("level") == "total")
    # projected to sum to the respondents, then each count rounded: within k − 1 of them
    assert abs(sum(total[f"race_{r}"][0] for r in "123") - nhanes.height) <= 2


# -- the command line ---------------------------------------------------------------------------


def test_the_command_line_records_serves_releases_and_plans(tmp_path: Path) -> None:
    path = write_spec(tmp_path, spec())
    reports().write_parquet(tmp_path / "answers.parquet")
    book = str(tmp_path / "ledger.sqlite")
    refused = invoke_cli("local", "wave", "--spec", str(path), "--ledger", book)
    one_line_error(refused, "is new: give its lifetime cap")
    assert not Path(book).exists()  # no ledger is created for a wave that cannot be recorded
    recorded = invoke_cli("local", "wave", "--spec", str(path), "--ledger", book, "--cap", "2")
    assert recorded.exit_code == 0, recorded.output
    assert "ε = 1 charged to scope 'respondents'" in recorded.stdout
    config = json.loads(recorded.stdout.strip().splitlines()[-1])
    assert config == {"version": "dprelease-local/1", "mechanism": "krr", "epsilon": "1",
                      "domain": WAVE["domain"], "wave": WAVE["id"], "question": "drug_use",
                      "wave_hash": dp.local.load(spec()).wave.hash}  # fmt: skip
    released = invoke_cli(
        "release", "--spec", str(path), "--data", str(tmp_path / "answers.parquet"),
        "--out", str(tmp_path / "pub"), "--ledger", book, "--format", "csv,xlsx,sdmx",
    )  # fmt: skip
    assert released.exit_code == 0, released.output
    assert "charged nothing" in " ".join(released.stdout.split())
    assert {p.name for p in (tmp_path / "pub").iterdir()} == {
        "release.csv", "release.xlsx", "release.sdmx.csv", "manifest.json"
    }  # fmt: skip
    manifest = json.loads((tmp_path / "pub" / "manifest.json").read_text())
    assert manifest["statistics"][0]["kind"] == "randomized"
    status = invoke_cli("ledger", "status", "--ledger", book)
    assert status.exit_code == 0 and "respondents   ε        2       1      1" in status.stdout
    assert (
        "respondents: sequential; local-DP waves: answer neighbours (who answered is public); "
        "privacy unit each row" in " ".join(status.stdout.split())
    )
    js = invoke_cli("local", "js", "--spec", str(path))
    assert js.stdout.splitlines()[0] == str(dp.local.js_module_path())
    assert json.loads(js.stdout.splitlines()[1]) == config
    planned = invoke_cli(
        "local", "plan", "--respondents", "10000", "--categories", "2", "--epsilon", "1",
        "--target", "0.01",
    )  # fmt: skip
    assert "71x the SD" in planned.stdout and "35,368 respondents" in planned.stdout
    one_line_error(
        invoke_cli("local", "plan", "--respondents", "10", "--categories", "1", "--epsilon", "1"),
        "categories",
    )


def test_the_command_line_refuses_a_release_of_an_unrecorded_wave(tmp_path: Path) -> None:
    path = write_spec(tmp_path, spec())
    reports().write_parquet(tmp_path / "answers.parquet")
    dp.local.record_wave(spec({"id": "other-wave"}), ledger=ledger(tmp_path), cap=2)
    refused = invoke_cli(
        "release", "--spec", str(path), "--data", str(tmp_path / "answers.parquet"),
        "--out", str(tmp_path / "pub"), "--ledger", str(tmp_path / "ledger.sqlite"),
    )  # fmt: skip
    one_line_error(refused, "wave 'drug-use-2025-05' is not recorded")
    assert not (tmp_path / "pub").exists()


def test_the_plan_of_a_randomized_release_says_it_adds_no_noise() -> None:
    """The plan's header named the default mechanism ('laplace noise') for a release that adds
    none: its statistics are post-processing of answers randomized on the devices."""
    header = str(dp.plan(spec())).splitlines()[0]
    assert "no noise at release (answers randomized on the devices)" in header
    assert "laplace" not in header
