"""The spec side of key selection: `domain: {select: true}` and its refusals, one line each at
the YAML path, including the statistician's case of a group-by column given no domain at all."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import polars as pl
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


@pytest.mark.parametrize("margins", [[["region"]], [["diagnosis"]], [[]]])
def test_margins_with_a_selected_column_are_refused(
    tmp_path: Path, margins: list[list[str]]
) -> None:
    """A margin over a selected key set would total only the selected keys (or, keeping the
    column, have a level grid that depends on the selection): refused in one line, whatever
    the margin."""
    group_by = [REGION, {"column": "diagnosis", "domain": {"select": True}}]
    message = refusal(tmp_path, group_by, margins=margins)
    assert message.startswith("release.margins: margins are not released with keys selected")
    assert "'diagnosis' has select: true" in message


def test_a_selected_domain_resolves_to_its_always_keys(tmp_path: Path) -> None:
    """Resolving no longer refuses select: true (phase 1 did); the entry holds its public
    `always` keys until a release draws the selection, typed as they are (text without any)."""
    plain = load_spec(spec_file(tmp_path, [{"column": "diagnosis", "domain": {"select": True}}]))
    assert plain.domains[0].height == 0 and plain.domains[0].schema["diagnosis"] == pl.String
    assert plain.selected == (0,)
    listed = load_spec(
        spec_file(tmp_path, [REGION, {"column": "code", "domain": {"select": True, "always": [7]}}])
    )
    assert listed.domains[1]["code"].to_list() == [7] and listed.selected == (1,)
    joint = load_spec(
        spec_file(
            tmp_path,
            [{"columns": ["a", "b"], "domain": {"select": True, "always": [["x", "y"]]}}],
        )
    )
    assert joint.domains[0].rows() == [("x", "y")]


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
