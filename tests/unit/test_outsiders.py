"""What outsiders broke, library side: pandas dtypes are a declared schema, public keys files
are read like confidential input, and a mean never states more than its bounds allow.

Each test failed before its fix (issue 18); the faces (CLI, API) are tested in
tests/system/test_outsider_inputs.py.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import polars as pl
import pytest
import yaml
from helpers import (
    ROOT,
    allocation_of,
    draw_release,
    exact_table,
    make_spec,
    prepare_release,
)

from dprelease.budget import PrivacyConfig, cap_from_profile, choose_budget, load_privacy_profiles
from dprelease.change import ProtectedChange
from dprelease.errors import SchemaError, SpecError
from dprelease.mechanism.margins import Measured
from dprelease.mechanism.noise import NoiseSource, discrete_laplace
from dprelease.spec import ResolvedSpec, load_spec

# --- a pandas frame's dtypes are its declared schema ------------------------------------------

PARTY_SPEC = {
    "name": "t",
    "source": "t",
    "privacy_unit": "pid",
    "max_rows_per_unit": 1,
    "group_by": [{"column": "region", "domain": {"values": ["n", "s"]}}],
    "statistics": [
        {"name": "n", "kind": "count"},
        {"name": "m", "kind": "mean", "column": "party", "lower": 0, "upper": 10},
    ],
}
TEXT_DTYPES = ["object", "string", "str"]  # object, StringDtype(NA), pandas 3's default str


def party_frame(text_dtype: str) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "pid": [1, 2, 3],
            "region": ["n", "s", "s"],
            "party": pd.Series(["3", "7", "x"], dtype=text_dtype),
        }
    )


@pytest.mark.parametrize("text_dtype", TEXT_DTYPES)
def test_a_mean_over_a_pandas_text_column_is_refused_as_parquet_and_polars_are(
    text_dtype: str,
) -> None:
    frame = party_frame(text_dtype)
    expected = "column 'party': has dtype String but statistic 'm' needs a numeric column"
    with pytest.raises(SchemaError, match=expected):
        prepare_release(pl.from_pandas(frame.astype({"party": "string"})), make_spec(PARTY_SPEC))
    with pytest.raises(SchemaError, match=expected) as refused:
        prepare_release(frame, make_spec(PARTY_SPEC))
    message = str(refused.value)
    assert "pandas" in message and "text" in message and "pd.to_numeric" in message
    assert "\n" not in message and "'x'" not in message  # one line, no value


@pytest.mark.parametrize("text_dtype", TEXT_DTYPES)
def test_a_sum_over_a_pandas_text_column_is_refused(text_dtype: str) -> None:
    spec = make_spec(
        PARTY_SPEC,
        statistics=[{"name": "s", "kind": "sum", "column": "party", "lower": 0, "upper": 10}],
    )
    with pytest.raises(SchemaError, match="statistic 's' needs a numeric column"):
        prepare_release(party_frame(text_dtype), spec)


def test_an_object_column_of_numbers_is_text_too() -> None:
    """The dtype declares the type, never the values: an object column holding Python ints is
    refused as a text column would be (a schema chosen from the data would be data-dependent)."""
    frame = party_frame("object")
    frame["party"] = pd.Series([3, 7, 1], dtype=object)
    with pytest.raises(SchemaError, match="needs a numeric column.*pd.to_numeric"):
        prepare_release(frame, make_spec(PARTY_SPEC))
    frame["party"] = pd.to_numeric(frame["party"])  # what the message says to do
    assert exact_table(frame, make_spec(PARTY_SPEC)).get_column("m").to_list() == [3.0, 4.0]


SMOKERS = pd.DataFrame(
    {"pid": [1, 2, 3, 4, 5], "region": ["n", "n", "n", "s", "s"], "smoker": [1, 0, 1, 1, 1]}
)
SMOKER_GRID = {"column": "smoker", "lower": 0, "upper": 1}
SMOKER_SPEC = make_spec(
    PARTY_SPEC,
    statistics=[
        {"name": "smokers", "kind": "sum", **SMOKER_GRID},
        {"name": "rate", "kind": "mean", **SMOKER_GRID},
        {"name": "mid", "kind": "median", **SMOKER_GRID, "resolution": 1},
    ],
)


@pytest.mark.parametrize("dtype", ["bool", "boolean"])
def test_a_boolean_column_is_read_as_0_and_1_where_a_number_is_needed(dtype: str) -> None:
    """Issue 26: a bool column was refused for a sum, mean or quantile, and the message's fix
    (pd.to_numeric) left it bool. It is read as 0/1, as the engines cast it: a sum counts the
    True rows, a mean is their share, a median is 0 or 1 (pandas' bool and nullable boolean;
    polars' Boolean; a null is missing, as in any number column)."""
    frame = SMOKERS.astype({"smoker": dtype})
    for data in (frame, pl.from_pandas(frame)):
        table = exact_table(data, SMOKER_SPEC, 1000)
        assert table.get_column("smokers").to_list() == [2.0, 2.0]
        assert table.get_column("rate").to_list() == pytest.approx([2 / 3, 1.0], abs=0.01)
        assert table.get_column("mid").to_list() == [1.0, 1.0]


@pytest.mark.spark
def test_the_spark_engine_reads_a_boolean_column_as_0_and_1_too(tmp_path: Path) -> None:
    from sparktest import local_session

    local_session()
    path = tmp_path / "smokers.parquet"
    pl.from_pandas(SMOKERS.astype({"smoker": "bool"})).write_parquet(path)
    on_spark = exact_table(path, SMOKER_SPEC, 1000, engine="spark")
    assert on_spark.equals(exact_table(path, SMOKER_SPEC, 1000, engine="polars"))
    assert on_spark.get_column("smokers").to_list() == [2.0, 2.0]


@pytest.mark.parametrize("text_dtype", TEXT_DTYPES)
def test_an_integer_domain_on_a_pandas_text_column_is_refused_as_the_reverse_case_is(
    text_dtype: str,
) -> None:
    coded = make_spec(PARTY_SPEC, group_by=[{"column": "code", "domain": {"values": [1, 2]}}])
    named = make_spec(PARTY_SPEC, group_by=[{"column": "code", "domain": {"values": ["a"]}}])
    ints = pd.DataFrame({"pid": [1, 2], "code": [1, 2], "party": [1.0, 2.0]})
    with pytest.raises(SchemaError, match="column 'code': has dtype Int64 but its public key"):
        prepare_release(ints, named)  # the reverse case, refused before too
    texts = ints.astype({"code": text_dtype})
    with pytest.raises(SchemaError, match="column 'code': has dtype String but its public key"):
        prepare_release(texts, coded)


def test_a_pandas_period_column_of_date_objects_is_text() -> None:
    """pandas has no date dtype: `datetime.date` values sit in an object column, which is text;
    the message says how to declare dates."""
    spec = make_spec(PARTY_SPEC, period={"column": "day"})
    frame = party_frame("object").assign(
        party=[1.0, 2.0, 3.0], day=[dt.date(2024, 1, 2), dt.date(2024, 1, 3), None]
    )
    with pytest.raises(SchemaError, match="needs Date or Datetime.*pd.to_datetime"):
        prepare_release(frame, spec, period="2024-01")
    frame["day"] = pd.to_datetime(frame["day"])
    table = exact_table(frame, spec, period="2024-01")
    assert table.get_column("n").to_list() == [1, 1]


def test_pandas_columns_typed_as_declared_release_what_polars_releases() -> None:
    """Numbers, nullable integers, booleans, datetimes and categoricals (text or integer
    categories) keep their declared types: the same release as the polars frame."""
    frame = pd.DataFrame(
        {
            "pid": pd.array([1, 2, 3, None], dtype="Int64"),
            "region": pd.Categorical(["n", "s", "s", "n"]),
            "code": pd.Categorical([1, 2, None, 1]),
            "flag": pd.array([True, False, None, True], dtype="boolean"),
            "party": [1.5, 2.5, None, 9.0],
            "day": pd.to_datetime(["2024-01-02", "2024-01-05", "2024-01-09", "2024-02-01"]),
        }
    )
    spec = make_spec(
        PARTY_SPEC,
        period={"column": "day"},
        group_by=[
            {"column": "region", "domain": {"values": ["n", "s"]}},
            {"column": "code", "domain": {"min": 1, "max": 2}},
            {"column": "flag", "domain": {"values": [True, False]}},
        ],
    )
    from_pandas = exact_table(frame, spec, period="2024-01")
    assert from_pandas.equals(exact_table(pl.from_pandas(frame), spec, period="2024-01"))
    assert from_pandas.get_column("n").sum() == 2


# --- public keys files are read like confidential input ---------------------------------------

SECRET = "confidential-value-42"


def keyed(folder: Path, domain: dict[str, Any]) -> ResolvedSpec:
    """A spec whose one group-by column takes `domain`, read from `folder/spec.yaml`."""
    spec = {**PARTY_SPEC, "group_by": [{"column": "clinic", "domain": domain}]}
    (folder / "spec.yaml").write_text(yaml.safe_dump({"release": spec}))
    return load_spec(folder / "spec.yaml")


def refused_keys_file(folder: Path, file: str, *words: str) -> str:
    with pytest.raises(SpecError) as refused:
        keyed(folder, {"file": file})
    message = str(refused.value)
    assert message.startswith("release.group_by[0].domain.file: ")
    # short apart from the paths it names (pytest's temporary paths vary in length)
    words_of_its_own = message.replace(str(folder.parent), "")
    assert "\n" not in message and len(words_of_its_own) < 400, message
    assert SECRET not in message and "clinic-" not in message
    for word in words:
        assert word in message, message
    return message


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"", ["is empty"]),
        (b"clinic\n" + SECRET.encode("utf-16"), ["not UTF-8"]),
        (f'clinic\n"{SECRET}\nclinic-b"x,y\n"clinic-c\n'.encode(), ["not a well-formed CSV"]),
        (b"clinic\n" + "".join(f"{i}\n" for i in range(149)).encode() + SECRET.encode(), []),
    ],
    ids=["empty", "utf-16", "bad quoting", "late text"],
)
def test_a_bad_keys_file_is_one_line_naming_path_and_file_never_its_content(
    tmp_path: Path, content: bytes, words: list[str]
) -> None:
    (tmp_path / "keys.csv").write_bytes(content)
    if not words:  # a readable file: its keys are typed from all of its rows, text here
        keys = keyed(tmp_path, {"file": "keys.csv"}).domains[0].get_column("clinic")
        assert keys.dtype == pl.String and keys.len() == 150 and keys.n_unique() == 150
        return
    refused_keys_file(tmp_path, "keys.csv", str(tmp_path / "keys.csv"), *words)


def test_a_keys_file_that_is_not_parquet_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "keys.parquet").write_text(f"clinic\n{SECRET}\n")
    refused_keys_file(tmp_path, "keys.parquet", "not a readable parquet file")


def test_a_duplicate_key_is_refused_without_quoting_it(tmp_path: Path) -> None:
    (tmp_path / "keys.csv").write_text(f"clinic\n{SECRET}\nclinic-b\n{SECRET}\n")
    refused_keys_file(tmp_path, "keys.csv", "lists a key more than once")


@pytest.mark.parametrize("outside", ["../keys.csv", "../../../../etc/passwd", "ABSOLUTE"])
def test_a_keys_file_outside_the_spec_directory_is_refused(tmp_path: Path, outside: str) -> None:
    specs = tmp_path / "specs"
    specs.mkdir()
    pl.DataFrame({"clinic": ["a", "b"]}).write_csv(tmp_path / "keys.csv")
    file = str(tmp_path / "keys.csv") if outside == "ABSOLUTE" else outside
    refused_keys_file(specs, file, "outside the spec's directory", "outside_spec_dir: true")


def test_a_symlink_out_of_the_spec_directory_is_outside_it(tmp_path: Path) -> None:
    specs = tmp_path / "specs"
    specs.mkdir()
    pl.DataFrame({"clinic": ["a", "b"]}).write_csv(tmp_path / "keys.csv")
    (specs / "keys.csv").symlink_to(tmp_path / "keys.csv")
    refused_keys_file(specs, "keys.csv", "outside the spec's directory")


def test_a_keys_file_is_read_relative_to_the_spec_not_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "specs" / "public").mkdir(parents=True)
    pl.DataFrame({"clinic": ["a", "b"]}).write_csv(tmp_path / "specs" / "public" / "keys.csv")
    pl.DataFrame({"clinic": ["x"]}).write_csv(tmp_path / "keys.csv")  # a decoy beside the cwd
    monkeypatch.chdir(tmp_path)
    resolved = keyed(tmp_path / "specs", {"file": "public/keys.csv"})
    assert resolved.domains[0].get_column("clinic").to_list() == ["a", "b"]


def test_outside_spec_dir_allows_a_keys_file_elsewhere_and_enters_the_hash_only_when_set(
    tmp_path: Path,
) -> None:
    specs = tmp_path / "specs"
    specs.mkdir()
    pl.DataFrame({"clinic": ["a", "b"]}).write_csv(tmp_path / "keys.csv")
    pl.DataFrame({"clinic": ["a", "b"]}).write_csv(specs / "keys.csv")
    inside = keyed(specs, {"file": "keys.csv"})
    allowed = keyed(specs, {"file": str(tmp_path / "keys.csv"), "outside_spec_dir": True})
    assert allowed.domains[0].equals(inside.domains[0])
    assert "outside_spec_dir" not in inside.spec.canonical_json()
    assert '"outside_spec_dir":true' in allowed.spec.canonical_json()
    unset = keyed(specs, {"file": "keys.csv", "outside_spec_dir": False})
    assert unset.hash == inside.hash  # false is the default: the same spec
    assert "outside_spec_dir" not in inside.spec.to_yaml()


def test_the_repository_specs_keep_their_hashes() -> None:
    """Specs released before the option existed are the same specs: their slots stay theirs."""
    resolved = load_spec(ROOT / "pipelines" / "specs" / "visits_monthly.yaml")
    assert '"domain":{"column":null,"file":"public/clinics.csv"}' in resolved.spec.canonical_json()


def test_a_keys_file_that_is_a_fifo_is_refused_as_such(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "keys.csv")
    refused_keys_file(tmp_path, "keys.csv", "is a FIFO (named pipe), not a regular file")


# --- a mean never states more than its bounds allow ---------------------------------------------

AGE_SPEC = {
    "name": "t",
    "source": "t",
    "privacy_unit": "pid",
    "max_rows_per_unit": 1,
    "group_by": [{"column": "region", "domain": {"values": ["n", "s", "e", "w"]}}],
    "statistics": [
        {"name": "n", "kind": "count"},
        {"name": "mean_age", "kind": "mean", "column": "age", "lower": 18, "upper": 99},
    ],
}


def ages(rows_per_region: dict[str, int], age: float = 99.0) -> pl.DataFrame:
    regions = [region for region, rows in rows_per_region.items() for _ in range(rows)]
    return pl.DataFrame({"pid": range(len(regions)), "region": regions, "age": age})


def mean_rows(table: pl.DataFrame, name: str = "mean_age") -> list[tuple[Any, ...]]:
    return table.select(name, f"{name}_moe95", f"{name}_uninformative").rows()


def test_a_mean_at_its_bound_is_not_rounded_past_it() -> None:
    """`mean_age = 100.0` for bounds [18, 99] was published: 99 rounded to the hundreds of a
    margin of ±5600. Rounding stays within the bounds, and the margin within their width."""
    table = exact_table(ages({"n": 1, "s": 1, "e": 1, "w": 1}), make_spec(AGE_SPEC), 0.05)
    for mean, moe, uninformative in mean_rows(table):
        assert 18 <= mean <= 99 and mean == 99  # zero noise: the exact mean, at the bound
        assert moe == 81 and uninformative is True  # 99 − 18: the whole range


def uncovered(mean: float, moe: float, lower: float, upper: float) -> bool:
    """Whether the interval mean ± moe leaves part of [lower, upper] out (in decimals, as the
    numbers are printed: 0.28 − 0.18 is 0.1)."""
    mean_, moe_, lower_, upper_ = (Decimal(repr(x)) for x in (mean, moe, lower, upper))
    return mean_ - moe_ > lower_ or mean_ + moe_ < upper_


BOUNDS = [
    (18, 99, None),
    (0.1, 0.3, None),
    (-5, 5, None),
    (-1e6, -2.5, None),
    (18, 99, 0),
    (0.15, 0.35, 1),  # 0.35 rounds to 0.4: kept at 0.3
    (0.12, 0.18, 1),  # no tenth inside: kept at the bound, and never informative
]


def published_means(lower: float, upper: float, decimals: int | None) -> pl.DataFrame:
    """A mean's released columns over 20,000 cells of every size, from 1 to 10^5 rows (noisy
    counts and sums as the mechanism draws them, in one batch: post-processing is the same
    function per cell), true means anywhere in [lower, upper]."""
    spec = make_spec(
        AGE_SPEC,
        statistics=[
            {"name": "n", "kind": "count"},
            {"name": "m", "kind": "mean", "column": "age", "lower": lower, "upper": upper},
        ],
        postprocess={"decimals": decimals},
    )
    allocation = allocation_of(spec, Fraction(1, 2))
    mean = allocation.statistics[1]
    assert mean.count is not None
    cells = 20_000
    rng = np.random.default_rng(2024)
    rows = np.rint(10 ** rng.uniform(0, 5, cells))
    truth = rng.uniform(lower, upper, cells)
    noise = NoiseSource.seeded_for_tests(7)
    units = {m.name: discrete_laplace(m.scale_units, cells, noise) for m in allocation.measurements}
    noisy_count = pl.Series(rows.astype(np.int64) + units[mean.count.name])
    total = rows * truth + units[mean.measurement.name] * float(mean.measurement.granularity)
    measured = {
        mean.count.name: Measured(noisy_count, np.full(cells, mean.count.moe95)),
        mean.measurement.name: Measured(
            pl.Series(total), np.full(cells, mean.measurement.moe95), np.zeros(cells)
        ),
    }
    return pl.DataFrame(mean.columns(measured, None, spec.spec.postprocess))


@pytest.mark.parametrize(("lower", "upper", "decimals"), BOUNDS)
def test_every_published_mean_and_margin_stay_inside_what_the_bounds_allow(
    lower: float, upper: float, decimals: int | None
) -> None:
    """The mean within [lower, upper]; its margin never above the width plus one rounding
    step; flagged uninformative exactly where mean ± margin covers the bounds (null where the
    mean is undefined)."""
    width = upper - lower
    step = width / 10 if decimals is None else 10.0**-decimals  # the rounding's, at most
    flags = []
    for mean, moe, undefined, uninformative in published_means(lower, upper, decimals).rows():
        if undefined:
            assert mean is None and moe is None and uninformative is None
            continue
        assert lower <= mean <= upper
        assert 0 <= moe <= (width + step) * (1 + 1e-9)
        assert uninformative == (not uncovered(mean, moe, lower, upper))
        flags.append(uninformative)
    if (
        decimals is not None
        and Decimal(repr(step)) > (Decimal(repr(upper)) - Decimal(repr(lower))) / 2
    ):
        # no place inside: nothing to inform
        assert set(flags) == {True}
    else:
        assert set(flags) == {True, False}  # both kinds of cell were seen


@pytest.mark.parametrize("with_margins", [False, True])
def test_the_release_path_publishes_means_inside_their_bounds(with_margins: bool) -> None:
    """Through prepare and draw, with and without margins (whose means divide consistent
    estimates): the same guarantees on the released table."""
    spec = make_spec(AGE_SPEC, **({"margins": [[]]} if with_margins else {}))
    data = ages({"n": 1, "s": 30, "e": 3000, "w": 0})
    for seed in range(3):
        table = draw_release(data, spec, 0.5, noise=NoiseSource.seeded_for_tests(seed)).table
        for mean, moe, uninformative in mean_rows(table):
            if mean is not None:
                assert 18 <= mean <= 99 and moe <= 81 + 10
                assert uninformative == (not uncovered(mean, moe, 18, 99))


def test_an_informative_mean_is_published_as_before() -> None:
    """Where the margin is well inside the range, nothing changes: rounding to the second
    significant digit of the margin, the margin rounded up."""
    table = exact_table(ages({"n": 5000, "s": 5000, "e": 5000, "w": 5000}, age=40.0),
                        make_spec(AGE_SPEC), 4.0)  # fmt: skip
    for mean, moe, uninformative in mean_rows(table):
        assert mean == 40.0 and 0 < moe < 1 and uninformative is False


def test_the_manifest_says_what_an_uninformative_mean_is() -> None:
    release = draw_release(ages({"n": 1, "s": 1, "e": 1, "w": 1}), make_spec(AGE_SPEC), 0.05)
    entry = release.manifest.statistics[1]
    assert entry.kind == "mean"
    assert "mean_age_uninformative" in entry.uninformative
    assert "[18, 99]" in entry.uninformative and "whole range" in entry.uninformative
    assert "mean_age_uninformative" in release.table.columns


def test_uninformative_is_a_reserved_output_column() -> None:
    with pytest.raises(SpecError, match="would repeat"):
        make_spec(
            AGE_SPEC,
            statistics=[
                {"name": "m", "kind": "mean", "column": "age", "lower": 0, "upper": 1},
                {"name": "m_uninformative", "kind": "count"},
            ],
        )


# --- derivations in the column's units ----------------------------------------------------------


def test_a_sums_derivation_is_in_the_columns_units_in_manifest_and_plan() -> None:
    """`[18432, 101376] units of 0.000976562` was the manifest's and the plan's derivation of a
    sum over [18, 99]; they say `[18, 99]` and Δ = 2 × 99 = 198 now, for Δ in the column's units."""
    spec = make_spec(AGE_SPEC, max_rows_per_unit=2)
    release = draw_release(ages({"n": 3}), spec, 1)
    mean = release.manifest.statistics[1]
    assert mean.kind == "mean"
    derivation = mean.measurements[0].derivation
    assert "each clamped to [18, 99]" in derivation and derivation.endswith("Δ = 2 × 99 = 198")
    assert "units of" not in derivation
    assert mean.measurements[0].sensitivity == 198
    substitute = make_spec(
        AGE_SPEC,
        group_by=[],
        statistics=[{"name": "s", "kind": "sum", "column": "age", "lower": -0.5, "upper": 2.25}],
    )
    entry = allocation_of(substitute, 1, ProtectedChange.SUBSTITUTE).measurements[0]
    assert "in [-0.5, 2.25]" in entry.derivation and entry.derivation.endswith("= 2.75")


# --- the documents a new user reads ---------------------------------------------------------------


def yaml_blocks(markdown: str) -> list[str]:
    return re.findall(r"```yaml\n(.*?)```", markdown, flags=re.DOTALL)


def test_docs_privacy_documents_every_field_of_the_privacy_yaml(tmp_path: Path) -> None:
    """Every field and kind the loader accepts is documented, and the documented example loads
    and gives the ε the text states."""
    text = (ROOT / "docs" / "privacy.md").read_text()
    for field in PrivacyConfig.model_fields:
        assert f"**`{field}`**" in text, field
    for kind in ("piecewise_linear", "step", "constant", "max_fixed_q", "max_fixed_p"):
        assert f"kind: {kind}" in text, kind
    assert "`scopes:`" in text and "http" not in text
    (example,) = yaml_blocks(text)
    (tmp_path / "privacy.yaml").write_text(example)
    profiles = load_privacy_profiles(tmp_path / "privacy.yaml")
    assert cap_from_profile(choose_budget(profiles.for_scope("a_new_scope"))) == Fraction(3, 10)
    assert cap_from_profile(choose_budget(profiles.for_scope("hospital_patients"))) == 4


def test_the_docs_say_where_a_new_release_reads_and_what_it_may_spend() -> None:
    dagster = (ROOT / "docs" / "dagster.md").read_text()
    adding = dagster.split("## Adding a release")[1].split("## ")[0]
    assert "`<confidential dir>/<source>.parquet`" in adding
    assert "parquet dataset directory" in adding and "CSV" in adding
    assert "default profile unless `scopes:` names it" in " ".join(adding.split())
    assert "[privacy.md](privacy.md)" in adding
    refusals = (ROOT / "docs" / "refusals.md").read_text()
    bad_input = " ".join(refusals.split("## Bad input")[1].split("## ")[0].split())
    for refusal in ("not a regular file", "`--out` where no file can be written",
                    "outside the spec's directory", "pandas frame", "`２０２４-01`"):  # fmt: skip
        assert refusal in bad_input, refusal
