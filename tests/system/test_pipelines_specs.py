"""The pipeline's spec files (`pipelines/release_specs.py`, the library's `load_pipeline_specs`): a
bad spec is named by file and field, and stays one bad spec: the code location loads, the other
releases run, and the broken one is a release asset that fails with that one line."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
from helpers import MONTHLY, PIPELINE_SPECS, ROOT, failure, materialize, resources, spent

from dprelease.spec import load_pipeline_specs
from pipelines.definitions import build_definitions

#: A spec file with a YAML syntax error (an indented key after a mapping ended) at line 14.
BROKEN = """\
release:
  name: admissions_by_ward
  source: visits
  privacy_unit: patient_id
  max_rows_per_unit: 4
  group_by:
    - column: region
      domain: {values: [Northland, Eastvale]}
  statistics:
    - {name: admissions, kind: count}
publish:
  scope: hospital_patients
  share: 1/12
 last_period: 2024-12
"""
SYNTAX_ERROR = re.compile(
    r"^\S*admissions_monthly\.yaml: YAML syntax error at line 14, column 2: [^\n]+$"
)


def broken_beside_good(tmp_path: Path) -> Path:
    """The demo's spec files and `admissions_monthly.yaml`, which is not YAML."""
    specs = tmp_path / "specs"
    shutil.copytree(PIPELINE_SPECS, specs)
    (specs / "admissions_monthly.yaml").write_text(BROKEN)
    return specs


def test_a_broken_spec_beside_good_ones_fails_alone(root: Path) -> None:
    """The code location loads with every release, job, schedule and sensor of the good specs;
    a good release materializes; the broken spec is a release asset, named after its file (its
    release name cannot be read), whose materialization fails with the file's one line and no
    stack, touching nothing."""
    defs = build_definitions(broken_beside_good(root), resources=resources(root))
    dg.Definitions.validate_loadable(defs)
    keys = {a.key.to_user_string() for a in defs.assets or []}
    assert {MONTHLY, "case_control_by_genotype", "admissions_monthly"} <= keys
    assert defs.resolve_schedule_def(f"{MONTHLY}_schedule")
    assert defs.resolve_sensor_def(f"{MONTHLY}_publish_pending")
    assert defs.resolve_job_def(f"{MONTHLY}_monthly")
    broken = defs.resolve_assets_def("admissions_monthly")
    description = broken.specs_by_key[dg.AssetKey("admissions_monthly")].description or ""
    assert description.startswith("BROKEN SPEC: admissions_monthly.yaml does not load")
    instance = dg.DagsterInstance.ephemeral()
    assert materialize(defs, instance, [MONTHLY], "2024-03").success
    refused = materialize(defs, instance, ["admissions_monthly"])
    assert not refused.success
    assert SYNTAX_ERROR.match(failure(refused)), failure(refused)
    [step] = refused.get_step_failure_events()
    assert step.step_failure_data.error.stack == []
    assert spent(root, "hospital_patients")[1] == 1  # the good month only


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("share: 1/12", "share: 0"), r"publish\.share: .*\(0, 1\]"),
        (("share: 1/12", "share: lots"), r"publish\.share: .*fraction"),
        (("  first_period: 2024-01\n", ""), r"publish\.first_period: .*first period"),
        (("publish:", "published:"), r"a pipeline spec needs .* `release:` and `publish:`"),
        (("upper: 2000", "upper: -1"), r"release\.statistics\[1\]: lower .* must be < upper"),
        (("name: visits_by_clinic", "name: visits"), r"release\.name: .* source table 'visits'"),
    ],
)
def test_bad_pipeline_specs_name_file_and_field(
    root: Path, edit: tuple[str, str], message: str
) -> None:
    specs = root / "specs"
    shutil.copytree(PIPELINE_SPECS, specs)
    monthly = specs / "visits_monthly.yaml"
    assert edit[0] in monthly.read_text()
    monthly.write_text(monthly.read_text().replace(*edit))
    [problem] = load_pipeline_specs([specs]).problems
    assert re.search(rf"visits_monthly\.yaml: {message}", problem.message), problem.message
    defs = build_definitions(specs, resources=resources(root))
    name = "visits" if "name: visits" in edit[1] else MONTHLY
    refused = materialize(defs, dg.DagsterInstance.ephemeral(), [name])
    assert failure(refused) == problem.message
    assert materialize(defs, dg.DagsterInstance.ephemeral(), ["case_control_by_region"]).success


def test_clashing_spec_files_are_each_broken_and_keep_apart(root: Path) -> None:
    """Two files that release one name are both refused (which should win is not ours to
    guess), each as its own asset; a release named like a table another spec reads is refused."""
    specs = root / "specs"
    shutil.copytree(PIPELINE_SPECS, specs)
    region = (specs / "case_control_by_region.yaml").read_text()
    (specs / "copy_of_region.yaml").write_text(region)
    (specs / "named_like_a_table.yaml").write_text(
        region.replace("name: case_control_by_region", "name: visits").replace(
            "source: case_control", "source: admissions"
        )
    )
    catalog = load_pipeline_specs([specs])
    assert [r.spec.name for r in catalog.releases] == ["case_control_by_genotype", MONTHLY]
    assert [p.message for p in catalog.problems] == [
        "case_control_by_region.yaml: release.name: 'case_control_by_region' is also released "
        "by copy_of_region.yaml; each release needs a name of its own: rename one of them",
        "copy_of_region.yaml: release.name: 'case_control_by_region' is also released by "
        "case_control_by_region.yaml; each release needs a name of its own: rename one of them",
        "named_like_a_table.yaml: release.name: 'visits' is the source table of "
        "visits_monthly.yaml; in the pipeline both are assets: rename the release",
    ]
    defs = build_definitions(specs, resources=resources(root))
    dg.Definitions.validate_loadable(defs)
    keys = {a.key.to_user_string() for a in defs.assets or []}
    assert {"case_control_by_region", "copy_of_region", "named_like_a_table", "visits"} <= keys
    assert materialize(defs, dg.DagsterInstance.ephemeral(), [MONTHLY], "2024-01").success


def test_the_code_location_loads_from_dprelease_specs_dir_with_a_broken_spec(
    tmp_path: Path,
) -> None:
    """As `dg dev` and a deployment load it: `pipelines.definitions` in a fresh process, its
    specs from DPRELEASE_SPECS_DIR; Dagster's own validation passes, and the broken file is a
    one-line warning in the load log."""
    environment = {**os.environ, "DPRELEASE_SPECS_DIR": str(broken_beside_good(tmp_path))}
    environment.pop("DPRELEASE_DEPLOYMENT", None)
    checked = subprocess.run(
        [
            str(Path(sys.executable).parent / "dagster"),
            "definitions",
            "validate",
            "-m",
            "pipelines.definitions",
        ],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = checked.stdout + checked.stderr
    assert checked.returncode == 0, output
    assert "All code locations passed validation" in output
    [warning] = [line for line in output.splitlines() if "spec file not loaded" in line]
    assert "admissions_monthly.yaml: YAML syntax error at line 14, column 2" in warning


def test_a_broken_spec_is_launched_once_per_problem_so_the_ui_shows_it_failed(
    root: Path,
) -> None:
    """The `broken_specs` sensor (on by default) asks for one run of each broken asset per
    problem: the run list and the graph show the failure without anyone clicking."""
    specs = broken_beside_good(root)
    defs = build_definitions(specs, resources=resources(root))
    sensor = defs.resolve_sensor_def("broken_specs")
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING
    context = dg.build_sensor_context(definitions=defs)
    [request] = sensor.evaluate_tick(context).run_requests
    assert request.asset_selection == [dg.AssetKey("admissions_monthly")]
    assert request.tags["dagster/max_retries"] == "0"
    (specs / "admissions_monthly.yaml").write_text(BROKEN.replace(" last_period", "last_period"))
    fixed = build_definitions(specs, resources=resources(root))
    assert "broken_specs" not in {s.name for s in fixed.sensors or []}  # nothing broken
    assert "admissions_by_ward" in {a.key.to_user_string() for a in fixed.assets or []}
