"""`dprelease validate`: a pipeline's spec files and privacy YAML checked without data, as CI runs
it before a code location is reloaded: one line per problem and exit 2, or a short summary."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers import PIPELINE_SPECS, PRIVACY, invoke_cli

from dprelease.publish import validate_pipeline

#: A release of the case-control study with Gaussian noise, which a pure-ε scope refuses.
GAUSSIAN = """\
release:
  name: cases_gaussian
  source: case_control
  privacy_unit: participant_id
  max_rows_per_unit: 1
  mechanism: gaussian
  group_by:
    - column: case_status
      domain: {values: [case, control]}
  statistics:
    - {name: participants, kind: count}
publish:
  scope: case_control_study
  share: 1/2
"""


def test_the_repositorys_specs_and_privacy_yaml_are_valid() -> None:
    result = invoke_cli("validate", str(PIPELINE_SPECS), "--config", str(PRIVACY))
    assert result.exit_code == 0, result.output
    assert result.stdout == (
        "ok: 3 spec file(s), 3 release(s), 2 budget scope(s) (case_control_study, "
        f"hospital_patients), each budgeted and planned under {PRIVACY}\n"
    )
    assert result.stderr == ""


def test_every_problem_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """A YAML syntax error, two files releasing one name, a mechanism the scope's measure
    refuses, and periods composed two ways in one scope: all listed in one run, each naming its
    file; the good spec is not."""
    specs = tmp_path / "specs"
    shutil.copytree(PIPELINE_SPECS, specs)
    (specs / "admissions_monthly.yaml").write_text("release:\n  name: x\n bad: [\n")
    region = (specs / "case_control_by_region.yaml").read_text()
    (specs / "region_again.yaml").write_text(region)
    (specs / "gaussian.yaml").write_text(GAUSSIAN)
    parallel = (
        (specs / "visits_monthly.yaml")
        .read_text()
        .replace("composition: sequential", "composition: parallel")
    )
    (specs / "visits_parallel.yaml").write_text(parallel.replace("visits_by_clinic", "visits_par"))
    result = invoke_cli("validate", str(specs), "--config", str(PRIVACY))
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 6 and all(line.startswith("error: ") for line in lines)
    assert lines[0].startswith(
        f"error: {specs / 'admissions_monthly.yaml'}: YAML syntax error at line 3, column 2"
    )
    assert lines[1].startswith("error: case_control_by_region.yaml: release.name: ")
    assert lines[2].startswith("error: region_again.yaml: release.name: ")
    assert lines[3].startswith(
        "error: gaussian.yaml: release.mechanism: the Gaussian mechanism is ρ-zCDP, not ε-DP"
    )
    assert lines[4:] == [
        f"error: {name}: release.period.composition: the specs of scope 'hospital_patients' "
        "compose its periods differently (visits_monthly.yaml sequential, visits_parallel.yaml "
        "parallel); a scope composes one way for life"
        for name in ("visits_monthly.yaml", "visits_parallel.yaml")
    ]
    found = validate_pipeline([specs], PRIVACY)
    assert [r.spec.name for r in found.releases] == ["case_control_by_genotype"]


def test_a_bad_privacy_yaml_is_named_and_named_files_are_checked(tmp_path: Path) -> None:
    privacy = tmp_path / "privacy.yaml"
    privacy.write_text(PRIVACY.read_text().replace("rounding: 0.05", "rounding: -1", 1))
    result = invoke_cli(
        "validate", str(PIPELINE_SPECS / "visits_monthly.yaml"), "--config", str(privacy)
    )
    assert result.exit_code == 2
    assert result.stderr == f"error: {privacy}: privacy.rounding: Input should be greater than 0\n"


def test_defaults_come_from_the_deployments_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without arguments, what the code location reads: $DPRELEASE_SPECS_DIR and
    $DPRELEASE_PRIVACY_CONFIG; with neither, one line says what to give."""
    monkeypatch.delenv("DPRELEASE_SPECS_DIR", raising=False)
    monkeypatch.delenv("DPRELEASE_PRIVACY_CONFIG", raising=False)
    result = invoke_cli("validate")
    assert result.exit_code == 2
    assert result.stderr == (
        "error: PATHS: give spec files or a directory of them, or set DPRELEASE_SPECS_DIR\n"
    )
    monkeypatch.setenv("DPRELEASE_SPECS_DIR", str(PIPELINE_SPECS))
    unbudgeted = invoke_cli("validate")
    assert unbudgeted.exit_code == 0
    assert unbudgeted.stdout.startswith("ok: 3 spec file(s), 3 release(s)")
    assert unbudgeted.stderr == (
        "warning: no privacy YAML given (--config or $DPRELEASE_PRIVACY_CONFIG): budgets not "
        "checked\n"
    )
    monkeypatch.setenv("DPRELEASE_PRIVACY_CONFIG", str(PRIVACY))
    budgeted = invoke_cli("validate")
    assert budgeted.exit_code == 0 and budgeted.stderr == ""
    assert budgeted.stdout.rstrip().endswith(f"each budgeted and planned under {PRIVACY}")
    empty = tmp_path / "empty"
    empty.mkdir()
    nothing = invoke_cli("validate", str(empty))
    assert nothing.exit_code == 2
    assert nothing.stderr == f"error: {empty}: no spec files (*.yaml) to check\n"
