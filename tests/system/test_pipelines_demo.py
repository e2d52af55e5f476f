"""The demo (`pipelines/demo.py`, `python3 dev.py demo`): it runs the demo's releases only (the
spec files bundled in `pipelines/specs/`), never in another deployment, and states each release's
loss in its scope's unit, ρ for a zCDP scope."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
from helpers import MONTHLY, PIPELINE_SPECS, PRIVACY, ROOT, resources, words
from rich.console import Console

import pipelines.demo
from dprelease.ledger import Ledger
from pipelines.definitions import build_definitions

#: The demo's monthly release again, into a scope of its own that spends ρ (zCDP).
ZCDP_SCOPE = """\
  hospital_zcdp:
    measure: zcdp
    delta: 1.0e-9
    profile:
      kind: piecewise_linear
      points: [[0, 20000], [1, 3000], [10, 20000]]
    rounding: 0.05
"""


def test_the_demo_with_a_zcdp_release_states_rho(root: Path) -> None:
    """A zCDP spec beside the demo's: the demo path releases it with the others (its last three
    months too) and prints its loss as ρ, the others' as ε; the ledger table names each unit."""
    specs = root / "specs"
    shutil.copytree(PIPELINE_SPECS, specs)
    monthly = (specs / "visits_monthly.yaml").read_text()
    (specs / "visits_zcdp.yaml").write_text(
        monthly.replace("name: visits_by_clinic", "name: visits_zcdp").replace(
            "scope: hospital_patients", "scope: hospital_zcdp"
        )
    )
    privacy = root / "privacy.yaml"
    privacy.write_text(PRIVACY.read_text() + ZCDP_SCOPE)
    defs = build_definitions(specs, resources(root, privacy=privacy))
    output = io.StringIO()
    console = Console(file=output, width=200)
    assert pipelines.demo.run_demo(defs, dg.DagsterInstance.ephemeral(), console) == 0
    printed = words(output.getvalue())
    assert "materializing visits_zcdp_monthly for 2024-12 ..." in printed
    assert "│ visits_zcdp │ 2024-12 │ released and charged │ ρ = 0.0125 │" in printed
    assert f"│ {MONTHLY} │ 2024-12 │ released and charged │ ε = 1/3 ≈ 0.333 │" in printed
    assert (  # the cap's ρ with the (ε, δ) it implies: ρ + 2√(ρ ln 10⁹) = 3.68
        "│ hospital_zcdp │ sequential │ ρ = 0.15, i.e. (3.68, 1e-09)-DP │ 0.0375 │ 0.1125 │ 3 │"
    ) in printed
    with Ledger(str(root / "ledger.sqlite")) as book:
        assert {s.name: s.releases for s in book.status()} == {
            "case_control_study": 2,
            "hospital_patients": 3,
            "hospital_zcdp": 3,
        }


def test_the_demo_runs_the_bundled_specs_only(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Whatever DPRELEASE_SPECS_DIR names, the demo's releases are the bundled spec files."""
    elsewhere = tmp_path / "specs"
    shutil.copytree(PIPELINE_SPECS, elsewhere)
    (elsewhere / "case_control_by_region.yaml").unlink()
    monkeypatch.setenv("DPRELEASE_SPECS_DIR", str(elsewhere))
    monkeypatch.delenv("DPRELEASE_DEPLOYMENT", raising=False)
    ran: list[set[str]] = []

    def record(defs: dg.Definitions, instance: object, console: object) -> int:
        ran.append({a.key.to_user_string() for a in defs.assets or []})
        return 0

    monkeypatch.setattr(pipelines.demo, "run_demo", record)
    monkeypatch.setattr(pipelines.demo, "_instance", lambda: None)
    assert pipelines.demo.main() == 0
    assert "case_control_by_region" in ran[0]  # bundled, though not in DPRELEASE_SPECS_DIR


def test_the_demo_refuses_another_deployment(tmp_path: Path) -> None:
    """On a production deployment the demo would charge real scopes: `python -m pipelines.demo`
    refuses, in one line, before it loads the code location (whose production settings are not
    even set here)."""
    environment = {
        name: value for name, value in os.environ.items() if not name.startswith("DPRELEASE_")
    }
    refused = subprocess.run(
        [sys.executable, "-m", "pipelines.demo"],
        cwd=ROOT,
        env={**environment, "DPRELEASE_DEPLOYMENT": "production", "DAGSTER_HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert (refused.returncode, refused.stdout) == (2, "")
    assert refused.stderr == (
        "error: DPRELEASE_DEPLOYMENT=production: the demo runs only in the demo deployment (it "
        "releases the bundled demo specs, and would charge this deployment's ledger); unset "
        "DPRELEASE_DEPLOYMENT to run it\n"
    )
    assert list(tmp_path.iterdir()) == []  # no Dagster run, nothing written


def test_the_demo_piped_to_a_file_prints_scope_names_whole(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`python3 dev.py demo > log` (CI, `| tee`): the ledger table is not fitted into 80 columns,
    which cut `hospital_patients` to `hospital_pati…` and folded a zCDP cap over three lines."""
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("DPRELEASE_DEPLOYMENT", raising=False)
    name, cap = "case_control_study_of_every_participant", "ρ = 0.15, i.e. (3.68, 1e-09)-DP"

    def table(defs: object, instance: object, console: Console) -> int:
        from rich.table import Table

        printed = Table()
        for column in ("scope", "composition", "cap", "spent", "remaining", "releases"):
            printed.add_column(column)
        printed.add_row(name, "sequential", cap, "0.0375", "0.1125", "3")
        console.print(printed)
        return 0

    monkeypatch.setattr(pipelines.demo, "run_demo", table)
    monkeypatch.setattr(pipelines.demo, "_instance", lambda: None)
    assert pipelines.demo.main() == 0
    out = capsys.readouterr().out
    assert f"│ {name} │ sequential │ {cap} │" in words(out)
