"""A YAML file says one thing once: a key given twice in any mapping of a spec or a privacy
config is refused with the file, the line and the key (PyYAML keeps the last value silently:
a scope listed twice with B = 3 then B = 3000 got the cap of the second, ε = 4.0 not 0.55)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import invoke_cli, one_line_error

from dprelease.budget import load_privacy_profiles
from dprelease.errors import ConfigError, SpecError
from dprelease.spec import load_spec

SPEC = """\
release:
  name: visits
  source: visits
  privacy_unit: pid
  max_rows_per_unit: 4
  group_by:
    - column: region
      domain: {values: [n, s]}
  max_rows_per_unit: 400
  statistics:
    - {name: n, kind: count}
"""

PRIVACY = """\
privacy:
  profile: {kind: constant, bound: 2}
scopes:
  hospital:
    profile: {kind: constant, bound: 3}
  clinic:
    profile: {kind: constant, bound: 5}
  hospital:
    profile: {kind: constant, bound: 3000}
"""


def test_a_spec_key_given_twice_is_refused_with_file_line_and_key(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC)
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    assert str(caught.value) == (
        f"{path}: line 9: key 'max_rows_per_unit' given twice (first at line 5)"
    )


def test_a_scope_listed_twice_is_refused_not_the_last_one_taken(tmp_path: Path) -> None:
    path = tmp_path / "privacy.yaml"
    path.write_text(PRIVACY)
    with pytest.raises(ConfigError) as caught:
        load_privacy_profiles(path)
    assert str(caught.value) == f"{path}: line 8: key 'hospital' given twice (first at line 4)"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("release: {}\nrelease: {}\n", "line 2: key 'release' given twice (first at line 1)"),
        (  # inside a flow mapping in a list
            "a:\n  - {name: x, kind: count, name: y}\n",
            "line 2: key 'name' given twice (first at line 2)",
        ),
        (
            "a:\n  b:\n    c: 1\n    d: 2\n    c: 3\n",
            "line 5: key 'c' given twice (first at line 3)",
        ),
        ("a: 1\n'a': 2\n", "line 2: key 'a' given twice (first at line 1)"),  # quoted: the same
        ("1: x\n1: y\n", "line 2: key 1 given twice (first at line 1)"),
        ("yes: x\ntrue: y\n", "line 2: key True given twice (first at line 1)"),  # YAML 1.1
    ],
)
def test_every_mapping_is_checked(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "x.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_privacy_profiles(path)
    assert str(caught.value) == f"{path}: {problem}"


def test_a_merge_key_and_the_same_key_in_other_mappings_are_fine(tmp_path: Path) -> None:
    path = tmp_path / "privacy.yaml"
    path.write_text(
        "base: &base {kind: constant, bound: 2}\n"
        "privacy:\n"
        "  profile: {<<: *base, bound: 3}\n"  # an explicit key wins over a merged one
        "scopes:\n"
        "  a: {profile: {kind: constant, bound: 4}}\n"
        "  b: {profile: {kind: constant, bound: 4}}\n"
    )
    profiles = load_privacy_profiles(path)
    assert profiles.default.profile is not None
    assert profiles.default.profile.model_dump() == {"kind": "constant", "bound": 3.0}
    assert set(profiles.scopes) == {"a", "b"}


def test_two_listed_scopes_that_differ_only_in_case_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "privacy.yaml"
    path.write_text(
        "privacy: {profile: {kind: constant, bound: 2}}\n"
        "scopes:\n"
        "  Hospital: {profile: {kind: constant, bound: 3}}\n"
        "  hospital: {profile: {kind: constant, bound: 3000}}\n"
    )
    with pytest.raises(ConfigError, match="'Hospital' and 'hospital' differ only in letter case"):
        load_privacy_profiles(path)


def test_the_command_line_says_it_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "privacy.yaml").write_text(PRIVACY)
    (tmp_path / "spec.yaml").write_text(SPEC)
    result = invoke_cli("epsilon", "--config", str(tmp_path / "privacy.yaml"))
    one_line_error(result, "line 8: key 'hospital' given twice (first at line 4)")
    result = invoke_cli("plan", "--spec", str(tmp_path / "spec.yaml"), "--epsilon", "1")
    one_line_error(result, "spec.yaml: line 9: key 'max_rows_per_unit' given twice")
