"""The spec side of key selection: `domain: {select: true}` and its refusals, one line each at
the YAML path, including the statistician's case of a group-by column given no domain at all."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from helpers import invoke_cli, one_line_error

from dprelease.errors import SpecError
from dprelease.spec import ReleaseSpec, SelectDomain, load_spec


def spec_file(tmp_path: Path, group_by: list[dict[str, Any]], **extra: Any) -> Path:
    release = {
        "name": "visits",
        "source": "visits.csv",
        "privacy_unit": "person",
        "max_rows_per_unit": 1,
        "group_by": group_by,
        "statistics": [{"kind": "count", "name": "n"}],
        **extra,
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({"release": release}))
    return path


REGION = {"column": "region", "domain": {"values": ["north", "south"]}}


def refusal(tmp_path: Path, group_by: list[dict[str, Any]], **extra: Any) -> str:
    with pytest.raises(SpecError) as caught:
        load_spec(spec_file(tmp_path, group_by, **extra))
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_a_group_by_without_domain_says_what_to_give(tmp_path: Path) -> None:
    """Was pydantic's bare "group_by.1.domain Field required"."""
    message = refusal(tmp_path, [REGION, {"column": "diagnosis"}])
    assert message.startswith("release.group_by[1].domain: required: list the public keys")
    assert "select: true" in message


def test_the_cli_refuses_it_in_one_line(tmp_path: Path) -> None:
    path = spec_file(tmp_path, [REGION, {"column": "diagnosis"}])
    pd.DataFrame({"person": [1], "region": ["north"], "diagnosis": ["x"]}).to_csv(
        tmp_path / "visits.csv", index=False
    )
    result = invoke_cli("plan", "--spec", str(path), "--epsilon", "1")
    one_line_error(result, "release.group_by[1].domain", "select: true")


def test_select_domain_parses_with_its_options() -> None:
    spec = ReleaseSpec(
        name="visits",
        source="visits.csv",
        privacy_unit="person",
        max_rows_per_unit=3,
        group_by=[
            {
                "column": "diagnosis",
                "domain": {
                    "select": True,
                    "always": ["A00"],
                    "max_keys_per_unit": 3,
                    "policy": "weighted",
                },
            },
        ],  # fmt: skip
        statistics=[{"kind": "count", "name": "n"}],
    )
    group = spec.group_by[0]
    assert isinstance(group.domain, SelectDomain) and group.selects
    with pytest.raises(ValueError, match="stated by its selection"):
        _ = group.domain_kind
    assert (group.domain.always, group.domain.max_keys_per_unit) == (["A00"], 3)


@pytest.mark.parametrize(
    ("domain", "where", "words"),
    [
        ({"select": False}, "domain.select", "select: true"),
        ({"select": True, "always": []}, "domain.always", "empty list"),
        ({"select": True, "always": ["a", "a"]}, "domain.always", "duplicate key 'a'"),
        ({"select": True, "max_keys_per_unit": 0}, "domain.max_keys_per_unit", "1"),
        ({"select": True, "policy": "greedy"}, "domain.policy", "per_key"),
        ({"selct": True}, "domain", "select: true"),
    ],
)
def test_select_domain_refusals_name_the_field(
    tmp_path: Path, domain: dict[str, Any], where: str, words: str
) -> None:
    message = refusal(tmp_path, [{"column": "diagnosis", "domain": domain}])
    assert message.startswith(f"release.group_by[0].{where}: ")
    assert words in message


def test_joint_columns_list_always_as_combinations(tmp_path: Path) -> None:
    message = refusal(
        tmp_path, [{"columns": ["a", "b"], "domain": {"select": True, "always": [["x"]]}}]
    )
    assert message.startswith("release.group_by[0].domain.always[0]: must be a list of 2 keys")


def test_a_margin_over_a_selected_column_is_refused(tmp_path: Path) -> None:
    """Consistency over a selected key set: a margin that keeps the selected column is the sum of
    its released cells; one that adds up over it would total only the selected keys."""
    group_by = [REGION, {"column": "diagnosis", "domain": {"select": True}}]
    message = refusal(tmp_path, group_by, margins=[["region"]])
    assert message.startswith("release.margins[0]: this margin adds up over 'diagnosis'")
    assert "keep every selected column" in message
    kept = ReleaseSpec.model_validate(
        yaml.safe_load(spec_file(tmp_path, group_by, margins=[["diagnosis"]]).read_text())[
            "release"
        ]
    )
    assert kept.margins == [["diagnosis"]]


def test_until_the_engines_select_a_release_says_so(tmp_path: Path) -> None:
    """Phase 1: the spec and the planner know selection; resolving a grid from it is refused in
    one line instead of failing somewhere inside an engine."""
    message = refusal(tmp_path, [{"column": "diagnosis", "domain": {"select": True}}])
    assert message.startswith("release.group_by[0].domain: keys selected from the data")


def test_a_select_domain_gives_its_plan() -> None:
    from fractions import Fraction

    from dprelease.change import ProtectedChange
    from dprelease.loss import PrivacyLoss
    from dprelease.mechanism.selection import Policy, Rule, plan_for_domain

    domain = SelectDomain(select=True, max_keys_per_unit=2, policy="weighted")
    plan = plan_for_domain(
        domain, PrivacyLoss.pure(Fraction(1)), Fraction(1, 10**9), ProtectedChange.ADD_REMOVE
    )
    assert (plan.policy, plan.rule, plan.max_keys_per_unit) == (Policy.WEIGHTED, Rule.LAPLACE, 2)
