"""`dprelease epsilon`: table, --json, --plot, and the exit-2 one-line contract on bad input."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT
from typer.testing import CliRunner, Result

from dprelease.cli import app

EXAMPLE = ROOT / "examples" / "case_control.yaml"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def run(*args: str) -> Result:
    return CliRunner().invoke(app, ["epsilon", *args])


def test_table_shows_epsilon_min_and_adversaries() -> None:
    result = run("--config", str(EXAMPLE))
    assert result.exit_code == 0, result.output
    assert "ε_min = 0.3466" in result.stdout
    assert "ε = 0.3 " in result.stdout
    assert "prevalence" in result.stdout and "799" in result.stdout


def test_json_is_one_object_with_the_paper_numbers() -> None:
    result = run("--config", str(EXAMPLE), "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["epsilon_min"] == pytest.approx(0.5 * math.log(2))
    assert data["epsilon"] == 0.3
    assert (data["argmin_p10"], data["bound_at_argmin"], data["neighbours"]) == (
        1.0,
        2.0,
        "add_remove",
    )
    prevalence = data["adversaries"][0]
    assert {"name", "q", "q0", "p10", "bound", "epsilon"} <= prevalence.keys()
    assert prevalence["p10"] == pytest.approx(799.0) and prevalence["bound"] == 5.0
    assert prevalence["epsilon"] == pytest.approx(0.5 * math.log(5))
    assert [row["k"] for row in data["group_privacy"]] == [1, 2, 3, 4, 5]
    assert data["group_privacy"][1]["odds_factor"] == pytest.approx(math.exp(4 * 0.3))


def test_plot_writes_two_valid_pngs_into_a_new_directory(tmp_path: Path) -> None:
    target = tmp_path / "nested" / "plots"
    result = run("--config", str(EXAMPLE), "--json", "--plot", str(target))
    assert result.exit_code == 0, result.output
    json.loads(result.stdout)  # plots do not pollute the JSON
    for name in ("profile.png", "epsilon.png"):
        content = (target / name).read_bytes()
        assert content.startswith(PNG_SIGNATURE) and len(content) > 10_000


@pytest.mark.parametrize(
    ("yaml_text", "expected"),
    [
        ("privacy:\n  profile: {kind: constant, bound: [\n", "YAML syntax error at line 3"),
        (
            "privacy:\n  profile: {kind: piecewise_linear, points: [[0, 10], [1, 2], [10, 0.8]]}\n",
            "privacy.profile.points[2]: B = 0.8 < 1",
        ),
        (
            "privacy:\n  profile: {kind: constant, bound: 2}\n"
            "  adversaries: [{name: a, q: 0.5, q0: 0.5}, {name: b, q: 0.5, q0: 1}]\n",
            "privacy.adversaries[1].q0: q0 = 1.0",
        ),
    ],
)
def test_bad_input_exits_2_with_one_line_and_writes_nothing(
    tmp_path: Path, yaml_text: str, expected: str
) -> None:
    config = tmp_path / "privacy.yaml"
    config.write_text(yaml_text)
    plots = tmp_path / "plots"
    result = run("--config", str(config), "--plot", str(plots))
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0]
    assert "Traceback" not in result.stderr
    assert not plots.exists()


def test_missing_config_and_plot_path_that_is_a_file(tmp_path: Path) -> None:
    missing = run("--config", str(tmp_path / "nope.yaml"))
    assert missing.exit_code == 2 and "does not exist" in missing.stderr
    occupied = tmp_path / "file.png"
    occupied.write_bytes(b"x")
    result = run("--config", str(EXAMPLE), "--plot", str(occupied))
    assert result.exit_code == 2
    assert (
        result.stderr.strip() == f"error: --plot: {occupied} exists and is not a directory; "
        "give a directory"
    )
    assert result.stdout == ""


def test_the_dprelease_entry_point_prints_json() -> None:
    """The console script's entry point in a real process (exit-2 cases run in-process above)."""
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "from dprelease.cli import main; main()",
            "epsilon",
            "--config",
            str(EXAMPLE),
            "--json",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["epsilon_min"] == pytest.approx(0.5 * math.log(2))


ZCDP_PROFILE = """privacy:
  profile: {kind: piecewise_linear, points: [[0, 10], [1, 2], [10, 5]]}
  adversaries: [{name: naive, q: 0.5, q0: 0.5}]
  measure: zcdp
  delta: 1.0e-9
"""


def test_zcdp_shows_rho_max_beside_epsilon_min_in_tables_and_json(tmp_path: Path) -> None:
    """ε_min = ½ ln 2 and ρ_max = ((√(L + 2ε_min) − √L)/2)², L = ln(1/δ) (issue 20)."""
    config = tmp_path / "zcdp.yaml"
    config.write_text(ZCDP_PROFILE)
    tail = math.log(1e9)
    rho_max = ((math.sqrt(tail + math.log(2)) - math.sqrt(tail)) / 2) ** 2
    shown = run("--config", str(config))
    assert shown.exit_code == 0, shown.output
    words = " ".join(shown.stdout.split())  # rich wraps long sentences
    assert f"(ρ_max = {rho_max:.4g}) under ρ-zCDP with δ = 1e-09, beside ε_min = 0.3466" in words
    assert "With probability at least 1 − δ over the release" in words
    assert "ρ_P10" in words and "with probability ≥ 1 − δ" in words and "k²ρ" in words
    data = json.loads(run("--config", str(config), "--json").stdout)
    assert list(data)[:6] == ["epsilon_min", "epsilon", "measure", "delta", "rho_max", "rho"]
    assert (data["measure"], data["delta"]) == ("zcdp", 1e-9)
    assert data["rho_max"] == pytest.approx(rho_max, rel=1e-12) and data["rho"] == data["rho_max"]
    assert data["adversaries"][0]["rho"] == pytest.approx(rho_max, rel=1e-12)  # P10 = 1
    assert [row["rho"] for row in data["group_privacy"][:2]] == pytest.approx(
        [rho_max, 4 * rho_max]
    )


def test_scope_shows_that_scopes_profile_or_says_the_default_applies() -> None:
    config = str(ROOT / "pipelines" / "privacy.yaml")
    own = run("--config", config, "--scope", "hospital_patients", "--json")
    assert own.exit_code == 0, own.output
    data = json.loads(own.stdout)
    assert (data["scope"], data["scope_profile"]) == ("hospital_patients", "own")
    assert data["epsilon_min"] == pytest.approx(0.5 * math.log(3000))  # its B(1) = 3000
    listed_not = run("--config", config, "--scope", "case_control_study")
    assert listed_not.exit_code == 0, listed_not.output
    assert "not listed under `scopes:`: the default" in listed_not.stdout
    assert "ε_min = 0.3466" in listed_not.stdout  # the default profile's ½·ln 2
    typo = run("--config", config, "--scope", "Hospital_Patients")
    assert typo.exit_code == 2
    assert "'Hospital_Patients' is not listed, 'hospital_patients' is" in typo.output
