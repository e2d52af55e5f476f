"""`dprelease plan --compare` works on every privacy config × spec of the repository: a profile's
`rounding` is a step of its own measure (the demo's ε grid of 0.05 rounded a ρ of 0.0014 down to
0, and the comparison failed on the project's own pipelines/privacy.yaml), and the amounts are
shown exactly and briefly (not 187233267097/1500000000000)."""

from __future__ import annotations

import re
from fractions import Fraction
from pathlib import Path

import pytest
from helpers import ROOT, invoke_cli, words

import dprelease as dp
from dprelease.cli.plan import share_text

CONFIGS = sorted(
    path
    for path in [*ROOT.glob("examples/*.yaml"), *ROOT.glob("pipelines/*.yaml")]
    if path.read_text().startswith("privacy:") or "\nprivacy:" in path.read_text()
)
SPECS = sorted(
    path
    for path in [*ROOT.glob("pipelines/specs/*.yaml"), *ROOT.glob("examples/*.yaml")]
    if "\nrelease:" in "\n" + path.read_text()
)
LONG_FRACTION = re.compile(r"[0-9]{7,}/[0-9]{7,}")


def test_the_repository_has_configs_and_specs_to_compare() -> None:
    assert {p.name for p in CONFIGS} >= {"privacy.yaml", "case_control.yaml"}
    assert {p.name for p in SPECS} >= {"case_control_by_genotype.yaml", "visits_monthly.yaml"}


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.name)
@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.name)
def test_compare_works_on_every_config_and_spec(config: Path, spec: Path) -> None:
    result = invoke_cli("plan", "--spec", str(spec), "--config", str(config), "--compare")
    assert result.exit_code == 0, result.output
    text = words(result.stdout)
    assert "pure ε or zCDP?" in text and "smaller margins:" in text
    assert LONG_FRACTION.search(text) is None, text
    comparison = dp.plan(spec, privacy=config, compare=True).comparison
    assert comparison is not None and Fraction(comparison.rho_exact) > 0


def test_the_profiles_rounding_stays_with_its_own_measure(tmp_path: Path) -> None:
    """The demo's default profile rounds ε to 0.05 (cap 3/10); its ρ_max at δ = 10⁻⁹ is about
    0.0014, unrounded (a 0.05 grid has nothing below it)."""
    comparison = dp.plan(
        ROOT / "pipelines" / "specs" / "case_control_by_genotype.yaml",
        privacy=ROOT / "pipelines" / "privacy.yaml",
        compare=True,
    ).comparison
    assert comparison is not None
    assert Fraction(comparison.epsilon_cap_exact) == Fraction(3, 10)
    assert 0.0014 < Fraction(comparison.rho_cap_exact) < 0.0015
    zcdp = tmp_path / "zcdp.yaml"  # a zCDP profile's step rounds ρ, and leaves ε unrounded
    zcdp.write_text(
        "privacy:\n  profile: {kind: constant, bound: 3000}\n  measure: zcdp\n"
        "  delta: 1.0e-9\n  rounding: 0.001\n"
    )
    other = dp.plan(ROOT / "pipelines" / "specs" / "visits_monthly.yaml", privacy=zcdp,
                    compare=True).comparison  # fmt: skip
    assert other is not None and Fraction(other.rho_cap_exact) == Fraction(163, 1000)
    assert (Fraction(other.epsilon_cap_exact) * 10**12).denominator == 1  # ½ ln 3000, unrounded


@pytest.mark.parametrize(
    ("symbol", "cap", "releases", "text"),
    [
        ("ε", Fraction(3, 10), 2, "ε = 0.15"),
        ("ε", Fraction(346573590279, 10**12), 3, "ε = 0.115524530093"),
        ("ρ", Fraction(1425276394, 10**12), 3, "ρ = 0.001425276394/3 ≈ 0.000475"),
        ("ε", Fraction(4), 12, "ε = 1/3 ≈ 0.333"),
    ],
)
def test_a_share_is_exact_and_brief(symbol: str, cap: Fraction, releases: int, text: str) -> None:
    assert share_text(symbol, cap, releases) == text
