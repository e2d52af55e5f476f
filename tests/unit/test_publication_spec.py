"""The publication options of a spec: `postprocess.rules`, `round_to`, `decimals` down to −3,
`sampling:` and `publish.formats`. Each mistake is refused at its YAML path before anything is
charged; a spec without them reads, hashes and releases exactly as before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import BASE_SPEC, make_spec

from dprelease.errors import SpecError
from dprelease.spec import load_spec, parse_spec

WEIGHT = {"column": "w", "upper": 100}
SURVEY: dict[str, Any] = {
    **BASE_SPEC,
    "statistics": [
        {"name": "n", "kind": "count"},
        {"name": "people", "kind": "count", "survey_weight": WEIGHT},
        {"name": "cost", "kind": "sum", "column": "cost", "lower": 0, "upper": 100,
         "survey_weight": WEIGHT},
        {"name": "avg", "kind": "mean", "column": "cost", "lower": 0, "upper": 100,
         "survey_weight": WEIGHT},
        {"name": "med", "kind": "median", "column": "cost", "lower": 0, "upper": 100,
         "resolution": 1},
    ],
}  # fmt: skip


def refused(match: str, base: dict[str, Any] = BASE_SPEC, **fields: Any) -> str:
    with pytest.raises(SpecError, match=match) as caught:
        make_spec(base, **fields)
    return str(caught.value)


def test_a_spec_without_publication_options_keeps_its_hash() -> None:
    """The canonical form gains the new fields only when they are set."""
    plain = make_spec()
    assert "round_to" not in plain.spec.canonical_json()
    assert "rules" not in plain.spec.canonical_json()
    assert "sampling" not in plain.spec.canonical_json()
    rounded = make_spec(postprocess={"round_to": 5})
    assert rounded.hash != plain.hash
    flagged = make_spec(postprocess={"rules": [{"relative_margin_above": 0.3, "action": "flag"}]})
    assert flagged.hash not in (plain.hash, rounded.hash)


@pytest.mark.parametrize(
    ("fields", "path", "words"),
    [
        ({"round_to": 1}, "release.postprocess.round_to", "greater than or equal to 2"),
        ({"decimals": -4}, "release.postprocess.decimals", "greater than or equal to -3"),
        ({"rules": []}, "release.postprocess.rules", "at least 1"),
        ({"rules": [{"action": "flag"}]}, "release.postprocess.rules[0]", "give one test"),
        (
            {"rules": [{"value_below": 5, "relative_margin_above": 0.3, "action": "flag"}]},
            "release.postprocess.rules[0]",
            "give one test",
        ),
        ({"rules": [{"value_below": 5}]}, "release.postprocess.rules[0].action", "required"),
        (
            {"rules": [{"value_below": 5, "action": "hide"}]},
            "release.postprocess.rules[0].action",
            "'flag' or 'suppress'",
        ),
        (
            {"rules": [{"value_below": 5, "action": "flag", "statistics": ["nope"]}]},
            "release.postprocess.rules[0].statistics[0]",
            "'nope' is not a statistic",
        ),
        (
            {
                "rules": [
                    {"value_below": 5, "action": "flag", "name": "a"},
                    {"value_below": 9, "action": "flag", "name": "a"},
                ]
            },
            "release.postprocess.rules[1].name",
            "names another rule",
        ),  # fmt: skip
        (
            {"moe95_columns": False, "rules": [{"relative_margin_above": 0.3, "action": "flag"}]},
            "release.postprocess.rules[0].relative_margin_above",
            "moe95_columns",
        ),
    ],
)
def test_a_bad_publication_option_is_refused_at_its_path(
    fields: dict[str, Any], path: str, words: str
) -> None:
    message = refused(".", postprocess=fields)
    assert message.startswith(f"{path}:") and words in message, message


def test_a_rule_on_counts_needs_a_count_or_names_its_statistics() -> None:
    only_sums = {**BASE_SPEC, "statistics": [BASE_SPEC["statistics"][1]]}
    message = refused("name the statistics", only_sums, postprocess={"rules": [
        {"value_below": 10, "action": "suppress"}]})  # fmt: skip
    assert message.startswith("release.postprocess.rules[0].statistics:")
    assert make_spec(only_sums, postprocess={"rules": [
        {"value_below": 10, "action": "suppress", "statistics": ["cost"]}]})  # fmt: skip


def test_rounding_needs_a_count_or_a_sum() -> None:
    means = {**BASE_SPEC, "statistics": [
        {"name": "m", "kind": "mean", "column": "cost", "lower": 0, "upper": 100}]}  # fmt: skip
    refused("rounds counts and sums", means, postprocess={"round_to": 5})


def test_negative_decimals_round_sums_to_tens_but_never_a_mean_past_its_range() -> None:
    assert make_spec(postprocess={"decimals": -3}).spec.postprocess.decimals == -3
    with_mean = {**BASE_SPEC, "statistics": [
        *BASE_SPEC["statistics"],
        {"name": "m", "kind": "mean", "column": "cost", "lower": 0, "upper": 100}]}  # fmt: skip
    assert make_spec(with_mean, postprocess={"decimals": -1})  # tens within [0, 100]
    message = refused("coarser than the range", with_mean, postprocess={"decimals": -3})
    assert message.startswith("release.postprocess.decimals:") and "'m'" in message


@pytest.mark.parametrize(
    "statistic",
    [
        {"name": "s", "kind": "share", "column": "region", "categories": ["n"]},
        {"name": "r", "kind": "ratio", "numerator": {"column": "cost", "lower": 0, "upper": 9},
         "denominator": {"column": "cost", "lower": 0, "upper": 9}, "lower": 0, "upper": 9},
    ],
)  # fmt: skip
def test_a_share_or_a_ratio_is_never_rounded_past_its_range(statistic: dict) -> None:
    """A share in [0, 1] at decimals −1 would show 0 or 10; a ratio in [0, 9] likewise."""
    spec = {**BASE_SPEC, "statistics": [*BASE_SPEC["statistics"], statistic]}
    assert make_spec(spec, postprocess={"decimals": 0})
    message = refused("coarser than the range", spec, postprocess={"decimals": -1})
    assert f"'{statistic['name']}'" in message and f"a {statistic['kind']} would" in message


def test_a_ratios_sampling_error_comes_from_published_standard_errors_only() -> None:
    ratio = {"name": "r", "kind": "ratio", "numerator": {"column": "cost", "lower": 0, "upper": 9},
             "denominator": {"column": "cost", "lower": 0, "upper": 9}, "lower": 0, "upper": 9,
             "survey_weight": WEIGHT}  # fmt: skip
    spec = {**SURVEY, "statistics": [*SURVEY["statistics"], ratio]}
    message = refused("covariance", spec, sampling={"r": {"design_effect": 2, "respondents": "n"}})
    assert message.startswith("release.sampling.r.design_effect:")


@pytest.mark.parametrize(
    ("sampling", "path", "words"),
    [
        ({"nope": {"design_effect": 2, "respondents": "n"}}, "release.sampling.nope",
         "not a statistic"),
        ({"avg": {"respondents": "n"}}, "release.sampling.avg", "design_effect"),
        ({"avg": {"design_effect": 2}}, "release.sampling.avg.respondents", "sample size"),
        ({"avg": {"design_effect": 2, "respondents": "people"}}, "release.sampling.avg.respondents",
         "not an unweighted count"),
        ({"n": {"design_effect": 2, "respondents": "n"}}, "release.sampling.n", "unweighted"),
        ({"med": {"design_effect": 2, "respondents": "n"}}, "release.sampling.med", "median"),
        ({"avg": {"design_effect": 0, "respondents": "n"}}, "release.sampling.avg.design_effect",
         "greater than 0"),
        ({"avg": {"standard_errors": {"file": "se.csv"}, "respondents": "n"}},
         "release.sampling.avg.respondents", "the file gives the SEs"),
    ],
)  # fmt: skip
def test_a_bad_sampling_input_is_refused_at_its_path(
    sampling: dict[str, Any], path: str, words: str
) -> None:
    message = refused(".", SURVEY, sampling=sampling)
    assert message.startswith(f"{path}:") and words in message, message


def test_a_weighted_sum_needs_a_weighted_count_for_its_sampling_error() -> None:
    no_count = {**SURVEY, "statistics": [s for s in SURVEY["statistics"] if s["name"] != "people"]}
    no_count["statistics"] = [s for s in no_count["statistics"] if s["name"] != "avg"]
    refused("weighted count", no_count, sampling={"cost": {"design_effect": 2, "respondents": "n"}})


def test_generated_columns_may_not_repeat_another_column() -> None:
    clash = {**BASE_SPEC, "statistics": [
        {"name": "n", "kind": "count"}, {"name": "n_flag", "kind": "count"}]}  # fmt: skip
    message = refused("would repeat", clash, postprocess={"rules": [
        {"value_below": 1, "action": "flag"}]})  # fmt: skip
    assert "n_flag" in message


def test_published_standard_errors_are_read_and_checked_before_any_charge(tmp_path: Path) -> None:
    spec = {**SURVEY, "statistics": SURVEY["statistics"][:4]}

    def load(rows: str, **sampling: Any) -> Any:
        (tmp_path / "se.csv").write_text(rows)
        document = {"release": {**spec, "sampling": {"avg": {"standard_errors": {
            "file": "se.csv", **sampling}}}}}  # fmt: skip
        (tmp_path / "spec.yaml").write_text(yaml.safe_dump(document))
        return load_spec(tmp_path / "spec.yaml")

    resolved = load("region,se\nn,1.5\ns,2\ne,0.5\n")
    assert resolved.standard_errors["avg"].get_column("_se").to_list() == [1.5, 2.0, 0.5]
    assert resolved.hash != load("region,se\nn,1.5\ns,2\ne,0.6\n").hash  # its content counts
    where = "release.sampling.avg.standard_errors.file"
    for rows, words in [
        ("region,se\nn,1\ns,2\n", "no standard error for 1 row"),
        ("region,sd\nn,1\ns,2\ne,3\n", "no column 'se'"),
        ("region,se\nn,1\ns,-2\ne,3\n", "finite number ≥ 0"),
        ("region,se\nn,1\nn,1\ns,2\ne,3\n", "more than once"),
        ("region,se\nn,1\ns,x\ne,3\n", "not a number"),
    ]:
        with pytest.raises(SpecError, match=words) as caught:
            load(rows)
        assert str(caught.value).startswith(f"{where}:")
    assert load("region,sigma\nn,1\ns,2\ne,3\n", column="sigma")
    with pytest.raises(SpecError, match="outside the spec's directory"):
        (tmp_path / "sub").mkdir()
        document = {"release": {**spec, "sampling": {"avg": {"standard_errors": {
            "file": "../se.csv"}}}}}  # fmt: skip
        (tmp_path / "sub" / "spec.yaml").write_text(yaml.safe_dump(document))
        load_spec(tmp_path / "sub" / "spec.yaml")


def test_publish_formats_are_known_and_listed_once(tmp_path: Path) -> None:
    def load(formats: Any) -> Any:
        document = {
            "release": BASE_SPEC,
            "publish": {"scope": "s", "share": "1/2", "formats": formats},
        }
        (tmp_path / "spec.yaml").write_text(yaml.safe_dump(document))
        return load_spec(tmp_path / "spec.yaml")

    assert load(["csv", "xlsx", "sdmx"]).publish.formats == ["csv", "xlsx", "sdmx"]
    with pytest.raises(SpecError, match=r"publish\.formats\[1\]"):
        load(["csv", "pdf"])
    with pytest.raises(SpecError, match="each format once"):
        load(["csv", "csv"])


def test_the_options_round_trip_through_yaml() -> None:
    resolved = make_spec(
        SURVEY,
        postprocess={"round_to": 10, "rules": [{"value_below": 3, "action": "suppress"}]},
        sampling={"avg": {"design_effect": 1.5, "respondents": "n"}},
    )
    again = parse_spec(yaml.safe_load(resolved.spec.to_yaml())["release"])
    assert again.hash == resolved.hash
