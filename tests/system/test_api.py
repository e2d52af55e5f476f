"""The public API as a dataframe user meets it: `import dprelease as dp`, pandas in, a typed
result out; with a ledger the CLI's reserve → release → commit path, without one nothing."""

from __future__ import annotations

import inspect
import json
from fractions import Fraction
from pathlib import Path

import pandas as pd
import polars as pl
import pytest

import dprelease as dp
from dprelease.errors import ConfigError, LedgerNotFound, SchemaError, SpecError

SURVEY = pd.DataFrame(
    {
        "pid": [1, 2, 3, 4, 4],
        "region": ["n", "s", "s", "e", "e"],
        "code": [1.0, 2.0, 2.0, 3.0, 3.0],  # integer codes stored as floats
        "income": [10.0, 20.0, 30.0, 40.0, 50.0],
    }
)
SPEC = dp.ReleaseSpec(
    name="survey",
    source="survey",
    privacy_unit="pid",
    max_rows_per_unit=2,
    group_by=[
        dp.GroupBy(column="region", domain=dp.ValuesDomain(values=["n", "s", "e"])),
        dp.GroupBy(column="code", domain=dp.RangeDomain(min=1, max=3)),
    ],
    statistics=[
        dp.CountStatistic(name="n"),
        dp.SumStatistic(name="income", column="income", lower=0, upper=100),
        dp.MeanStatistic(name="mean_income", column="income", lower=0, upper=100),
    ],
)


def test_the_surface_is_small_typed_and_documented() -> None:
    assert set(dp.__all__) == {
        "CountStatistic", "DPReleaseError", "FileDomain", "GroupBy", "Ledger", "Manifest",
        "MeanStatistic", "Period", "PeriodSpec", "PostProcessing", "PrivacyLoss",
        "ProtectedChange", "QuantileStatistic", "RangeDomain", "RatioStatistic", "ReleasePlan",
        "ReleaseResult", "ReleaseSpec", "ShareStatistic", "StatisticAccuracy", "SumStatistic",
        "SurveyWeight", "ValuesDomain",
        "__version__", "local", "plan", "release",
    }  # fmt: skip
    for name in dp.__all__:
        if name != "__version__":
            assert inspect.getdoc(getattr(dp, name)), name
    for function in (dp.release, dp.plan):
        hints = inspect.get_annotations(function)
        assert "return" in hints and all(p in hints for p in inspect.signature(function).parameters)
    from dprelease.publish import prepare  # the internal path stays importable

    assert callable(prepare) and dp.release.__module__ == "dprelease.api"


def test_a_yaml_spec_and_a_python_spec_are_one_type(tmp_path: Path) -> None:
    (tmp_path / "spec.yaml").write_text(SPEC.to_yaml())
    assert dp.ReleaseSpec.from_yaml(tmp_path / "spec.yaml") == SPEC
    assert dp.ReleaseSpec.model_validate(SPEC.model_dump()) == SPEC
    result = dp.release(SURVEY, tmp_path / "spec.yaml", epsilon=1)  # a path works too
    assert result.table.columns[:2] == ["region", "code"]


def test_a_release_without_a_ledger_records_nothing_and_says_so(tmp_path: Path) -> None:
    result = dp.release(SURVEY, SPEC, epsilon="1/2")
    assert isinstance(result.table, pl.DataFrame) and result.table.height == 9
    frame = result.to_pandas()
    assert isinstance(frame, pd.DataFrame) and list(frame.columns) == result.table.columns
    assert isinstance(result.manifest, dp.Manifest)
    assert result.manifest.ledger.recorded is False and result.release_id is None
    assert "not recorded" in result.status and not result.charged
    assert result.accuracy == dp.plan(SPEC, "1/2").statistics
    assert [row.name for row in result.accuracy] == ["n", "income", "mean_income"]
    with pytest.raises(ConfigError, match="need a ledger"):
        dp.release(SURVEY, SPEC, epsilon=1, scope="s")


def test_with_a_ledger_it_takes_the_clis_path(tmp_path: Path) -> None:
    url = str(tmp_path / "ledger.sqlite")
    with dp.Ledger(url) as ledger:
        ledger.ensure_scope("survey", 1)
    first = dp.release(SURVEY, SPEC, epsilon="1/4", ledger=url)  # by URL; scope = spec name
    again = dp.release(SURVEY, SPEC, epsilon="1/4", ledger=url)
    assert (first.charged, again.charged) == (True, False)
    assert first.release_id == "survey/-" and "released and charged" in first.status
    assert "stored copy returned, nothing charged" in again.status
    assert again.table.equals(first.table)
    assert isinstance(first.manifest, dp.Manifest) and first.manifest.ledger.recorded is True
    with dp.Ledger(url, mode="read") as ledger:
        events = [e.kind for e in ledger.history("survey")]
        stored = ledger.stored_release("survey/-")
    assert events == ["scope_created", "terms_fixed", "reserved", "committed", "reused"]
    assert (
        stored is not None
        and json.loads(json.dumps(stored.manifest)) == first.manifest.to_json_dict()
    )


def test_refusals_come_before_the_ledger_is_touched(tmp_path: Path) -> None:
    url = str(tmp_path / "ledger.sqlite")
    with pytest.raises(LedgerNotFound):
        dp.release(SURVEY, SPEC, epsilon=1, ledger=url)  # never a new, empty budget
    assert not Path(url).exists()
    with dp.Ledger(url) as ledger:
        ledger.ensure_scope("other", 1)
        with pytest.raises(ConfigError, match="'survey' is new: give cap="):
            dp.release(SURVEY, SPEC, epsilon=1, ledger=ledger)  # a new scope needs its cap
        with pytest.raises(SchemaError, match="column 'income'"):
            dp.release(SURVEY.drop(columns="income"), SPEC, epsilon=1, ledger=ledger, cap=1)
        assert [e.kind for e in ledger.history()] == ["scope_created"]


def test_a_missing_ledger_is_explained_in_python_and_a_path_is_a_ledger(tmp_path: Path) -> None:
    """`ledger=` a missing file says what to do in Python (dp.Ledger creates it), not the CLI's
    "--ledger … (a release creates a new ledger)", which is untrue of dp.release; and a
    `pathlib.Path` is a ledger path for `dp.Ledger`, `dp.release` and `dp.plan` alike."""
    path = tmp_path / "ledger.sqlite"
    with pytest.raises(LedgerNotFound) as refused:
        dp.release(SURVEY, SPEC, epsilon=1, ledger=path)
    assert str(refused.value) == (
        f"no ledger at {path}; nothing was created. ledger= opens an existing ledger only, so "
        "that a mistyped path never reads as a fresh budget: pass ledger=dp.Ledger(path), "
        "which creates it, for the first release"
    )
    assert not path.exists()
    with dp.Ledger(path) as ledger:
        ledger.ensure_scope("survey", 1)
    assert dp.release(SURVEY, SPEC, epsilon="1/4", ledger=path).charged
    assert dp.plan(SPEC, ledger=path).statistics  # the scope's cap, read through the path
    with dp.Ledger(path, mode="read") as ledger:
        assert ledger.status("survey")[0].spent == Fraction(1, 4)


def test_a_new_scope_is_opened_with_the_cap_it_is_given(tmp_path: Path) -> None:
    """In an existing ledger, a release may open its scope when `cap` states the scope's
    lifetime cap; ε defaults to all of it (no `publish.share`)."""
    url = str(tmp_path / "ledger.sqlite")
    dp.Ledger(url).close()
    result = dp.release(SURVEY, SPEC, ledger=url, cap="1/2")
    with dp.Ledger(url, mode="read") as ledger:
        (status,) = ledger.status("survey")
    assert result.charged and (status.cap, status.spent) == (Fraction(1, 2), Fraction(1, 2))


def test_a_dict_spec_is_read_like_a_spec_file_and_anything_else_is_refused() -> None:
    as_dict = SPEC.model_dump(mode="json", exclude_none=True)
    assert dp.plan(as_dict, "1/2") == dp.plan(SPEC, "1/2")
    with pytest.raises(SpecError, match=r"^release\.statistics\[0\]\.kind: "):
        dp.plan({**as_dict, "statistics": [{"name": "n", "kind": "total"}]}, "1/2")
    with pytest.raises(SpecError, match=r"^spec: got a DataFrame: .*dp\.release\(data, spec"):
        dp.release(SPEC, SURVEY, epsilon=1)  # the data and the spec swapped


def test_a_plan_and_a_result_read_as_text_and_html_not_as_raw_models() -> None:
    """Issue 26: `print(dp.plan(...))` printed a raw pydantic object. A plan prints its
    header (the loss named by its measure) and one aligned row per statistic (a quantile one
    per p, its error in ranks); in a notebook the same as an HTML table; a result shows its
    status line above the released table."""
    quartiles = dp.QuantileStatistic(name="q", kind="quantile", column="income", lower=0,
                                     upper=100, resolution=1, p=[0.25, 0.5, 0.75])  # fmt: skip
    spec = SPEC.model_copy(update={"statistics": [*SPEC.statistics, quartiles]})
    names = [s.name for s in SPEC.statistics]
    planned = dp.plan(spec, epsilon="1/2")
    text = str(planned)
    assert repr(planned) == text and "ReleasePlan(" not in text
    lines = text.splitlines()
    assert lines[0].startswith("release 'survey' at ε = 0.5: laplace noise")
    assert lines[1].split() == ["statistic", "kind", "ε", "Δ", "scale", "±95%", "target"]
    assert [line.split()[0] for line in lines[2:-3]] == names
    assert lines[-3].split()[:2] == ["q", "quantile"] and "p = 0.25:" in lines[-3]
    assert "p = 0.75:" in lines[-1] and lines[-1].endswith("ranks")
    html = planned._repr_html_()
    assert html.startswith("<p>release") and html.count("<tr>") == len(lines) - 1
    zcdp = str(dp.plan(spec, rho="1/100")).splitlines()
    assert "ρ = 0.01 (zCDP)" in zcdp[0] and zcdp[1].split()[2] == "ρ"
    result = dp.release(SURVEY, spec, epsilon="1/2")
    shown = result._repr_html_()
    assert shown.startswith(f"<p>{repr(result)}</p>") and "<table" in shown
