"""The `privacy:` YAML section: the shipped example, and errors at the bad field's YAML path."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from helpers import ROOT

from dprelease.budget import (
    PrivacyConfig,
    budget_summary,
    choose_budget,
    companion_text,
    load_privacy_config,
)
from dprelease.change import ProtectedChange
from dprelease.errors import ConfigError, ProfileError

EXAMPLE = ROOT / "examples" / "case_control.yaml"
PAPER_PROFILE = {"kind": "piecewise_linear", "points": [[0, 10], [1, 2], [10, 5]]}


def test_shipped_example_reproduces_the_paper() -> None:
    choice = choose_budget(load_privacy_config(EXAMPLE))
    assert choice.epsilon_min == pytest.approx(0.5 * math.log(2))
    assert choice.epsilon == 0.3  # rounded down to the 0.05 grid
    assert (choice.argmin_p10, choice.bound_at_argmin) == (1.0, 2.0)
    prevalence, naive = choice.adversaries
    assert prevalence.name == "prevalence" and prevalence.p10 == pytest.approx(799.0)
    assert prevalence.bound == 5.0
    assert naive.p10 == 1.0 and naive.bound == 2.0


def test_substitute_and_individual_profiles_and_companion() -> None:
    config = PrivacyConfig.from_mapping(
        {
            "neighbours": "substitute",
            "profiles": [PAPER_PROFILE, {"kind": "step", "points": [[0, 3], [5, 1.5]]}],
            "prior_risk": {"kind": "constant", "r": 4},
        }
    )
    assert config.neighbours is ProtectedChange.SUBSTITUTE
    choice = choose_budget(config)
    assert choice.profile_index == 1 and choice.argmin_p10 == 5.0
    assert choice.epsilon == pytest.approx(math.log(1.5))
    assert choice.prior_risk_epsilon == pytest.approx(math.log(2))  # ½ log 4


def test_a_stricter_prior_risk_profile_binds_the_budget() -> None:
    """Odds profile allows ½ ln 2 ≈ 0.347; a constant r* = 1.5 allows only ½ ln 1.5 ≈ 0.203."""
    config = PrivacyConfig.from_mapping(
        {"profile": PAPER_PROFILE, "prior_risk": {"kind": "constant", "r": 1.5}, "rounding": 0.05}
    )
    choice = choose_budget(config)
    assert choice.epsilon_min == pytest.approx(0.5 * math.log(2))
    assert choice.prior_risk_epsilon == pytest.approx(0.5 * math.log(1.5))
    assert choice.epsilon == pytest.approx(0.20)
    summary = budget_summary(choice)[0]
    assert "bounded by the posterior-to-prior profile's 0.2027" in summary
    assert "binds" in companion_text(choice)


def bad(**section: Any) -> dict[str, Any]:
    return {"profile": PAPER_PROFILE, **section}


@pytest.mark.parametrize(
    ("section", "path", "words"),
    [
        (bad(profile={"kind": "piecewise_linear", "points": [[0, 10], [1, 2], [10, 0.8]]}),
         "privacy.profile.points[2]", "B = 0.8 < 1"),
        (bad(profile={"kind": "piecewise_linear", "points": [[0, 10], [1, math.nan]]}),
         "privacy.profile.points[1][1]", "finite number"),
        (bad(profile={"kind": "piecewise_linear", "points": [[0, 10], [-2, 2]]}),
         "privacy.profile.points[1]", "negative"),
        (bad(profile={"kind": "step", "points": [[0, 10], [4, 2], [3, 5]]}),
         "privacy.profile.points[2]", "strictly increasing"),
        (bad(profile={"kind": "piecewise_linear", "points": [[1, 2]]}),
         "privacy.profile.points", "at least 2"),
        (bad(profile={"kind": "constant", "bound": 0.5}), "privacy.profile.bound", "≥ 1"),
        (bad(profile={"kind": "spline", "points": []}), "privacy.profile.kind",
         "'spline' is not one of piecewise_linear, step, constant"),
        ({"profiles": [PAPER_PROFILE, {"kind": "constant", "bound": 0.9}]},
         "privacy.profiles[1].bound", "≥ 1"),
        (bad(profiles=[PAPER_PROFILE]), "privacy.profile", "exactly one of"),
        ({}, "privacy.profile", "exactly one of"),
        (bad(adversaries=[{"name": "a", "q": 1.5, "q0": 0.5}]), "privacy.adversaries[0].q",
         "q = 1.5"),
        (bad(adversaries=[{"name": "a", "q": 0.5, "q0": 0.5}, {"name": "b", "q": 0.5, "q0": 0}]),
         "privacy.adversaries[1].q0", "q0 = 0"),
        (bad(adversaries=[{"name": "a", "q": 0.5}]), "privacy.adversaries[0].q0", "required"),
        (bad(neighbours="bounded"), "privacy.neighbours", "'add_remove' or 'substitute'"),
        (bad(rounding=-0.05), "privacy.rounding", "greater than 0"),
        (bad(rounding=1), "privacy.rounding", "gives 0"),
        (bad(prior_risk={"kind": "max_fixed_q", "a": 0.1, "r": 2, "q": 0}),
         "privacy.prior_risk.q", "(0, 1]"),
        (bad(prior_risk={"kind": "constant", "r": 1}), "privacy.prior_risk.r", "> 1"),
        (bad(epsilon=1), "privacy.epsilon", "Extra inputs"),
    ],
)  # fmt: skip
def test_every_rejected_field_is_named_by_its_yaml_path(
    section: dict[str, Any], path: str, words: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        choose_budget(PrivacyConfig.from_mapping(section))
    assert caught.value.path == path
    assert str(caught.value).startswith(f"{path}: ")
    assert words in caught.value.message


def test_profile_errors_keep_their_type() -> None:
    with pytest.raises(ProfileError):
        PrivacyConfig.from_mapping(bad(profile={"kind": "constant", "bound": 0.5}))


def test_path_prefix_is_respected() -> None:
    with pytest.raises(ConfigError, match=r"^release\.privacy\.adversaries\[0\]\.q:"):
        PrivacyConfig.from_mapping(
            bad(adversaries=[{"name": "a", "q": 0, "q0": 0.5}]), path_prefix="release.privacy"
        )


def test_loader_errors_are_clear(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_privacy_config(tmp_path / "missing.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("privacy:\n  profile: {kind: constant, bound: [\n")
    with pytest.raises(ConfigError, match=r"YAML syntax error at line 3"):
        load_privacy_config(broken)
    other = tmp_path / "other.yaml"
    other.write_text("release: {}\n")
    top_level = r"^privacy: .*other\.yaml: a privacy config needs the top-level section\(s\)"
    with pytest.raises(ConfigError, match=top_level):
        load_privacy_config(other)
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("privacy: 3\n")
    with pytest.raises(ConfigError, match=r"^privacy: expected a mapping, got int"):
        load_privacy_config(scalar)


def test_scopes_have_their_own_profiles_and_others_use_the_default(tmp_path: Path) -> None:
    config = tmp_path / "privacy.yaml"
    config.write_text(
        "privacy:\n  profile: {kind: piecewise_linear, points: [[0, 10], [1, 2], [10, 5]]}\n"
        "scopes:\n  visits:\n    profile: {kind: constant, bound: 20}\n"
    )
    assert choose_budget(load_privacy_config(config, "visits")).epsilon == pytest.approx(
        0.5 * math.log(20)
    )
    default = 0.5 * math.log(2)
    assert choose_budget(load_privacy_config(config, "other")).epsilon == pytest.approx(default)
    assert choose_budget(load_privacy_config(config)).epsilon == pytest.approx(default)


@pytest.mark.parametrize(
    ("scopes", "path"),
    [
        ("scopes: [visits]\n", "scopes"),
        (
            "scopes:\n  visits: {profile: {kind: constant, bound: 0.5}}\n",
            "scopes.visits.profile.bound",
        ),
        ("scopes:\n  visits: {profile: {kind: step}}\n", "scopes.visits.profile.points"),
    ],
)
def test_a_bad_scope_section_fails_for_every_scope(tmp_path: Path, scopes: str, path: str) -> None:
    """The whole file is validated, so a typo in one scope stops every release before a charge."""
    config = tmp_path / "privacy.yaml"
    config.write_text("privacy:\n  profile: {kind: constant, bound: 2}\n" + scopes)
    with pytest.raises(ConfigError) as caught:
        load_privacy_config(config, "another_scope")
    assert caught.value.path == path


def test_a_scope_named_like_a_listed_one_but_for_case_is_refused_not_given_the_default() -> None:
    from helpers import ROOT

    from dprelease.budget import load_privacy_profiles

    profiles = load_privacy_profiles(ROOT / "pipelines" / "privacy.yaml")
    assert profiles.for_scope("hospital_patients") is profiles.scopes["hospital_patients"]
    assert profiles.for_scope("case_control_study") is profiles.default  # not listed: default
    with pytest.raises(ConfigError, match="'Hospital_Patients' is not listed, 'hospital_patients'"):
        profiles.for_scope("Hospital_Patients")
