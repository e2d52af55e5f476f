"""zCDP releases as users make them: the API on pandas, the command line, a Dagster
materialization; the planner's margins against simulated releases; pure ε or zCDP."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from helpers import ROOT, WORKSPACE_SPEC
from scipy import stats

import dprelease as dp
from dprelease.budget import cap_from_profile, choose_budget, load_privacy_profiles
from dprelease.loss import Measure, Mechanism, PrivacyLoss
from dprelease.mechanism import allocate
from dprelease.mechanism.noise import NoiseSource
from dprelease.spec import load_spec
from pipelines.definitions import build_definitions
from pipelines.resources import ConfidentialStore, LedgerResource, PrivacyPolicy, PublicStore

ZCDP_PRIVACY = """\
privacy:
  profile: {kind: constant, bound: 3000}
  measure: zcdp
  delta: 1.0e-9
  rounding: 0.001
"""


@pytest.fixture
def zcdp_workspace(workspace: Path) -> Path:
    (workspace / "privacy.yaml").write_text(ZCDP_PRIVACY)
    (workspace / "publish.yaml").write_text(
        WORKSPACE_SPEC + "publish: {scope: survey, share: 1/12, first_period: 2024-01}\n"
    )
    return workspace


def test_the_api_releases_in_rho_and_the_ledger_charges_rho(zcdp_workspace: Path) -> None:
    url = str(zcdp_workspace / "ledger.sqlite")
    dp.Ledger(url).close()
    data = pl.read_parquet(zcdp_workspace / "visits.parquet").to_pandas()
    spec = zcdp_workspace / "publish.yaml"
    result = dp.release(
        data, spec, privacy=zcdp_workspace / "privacy.yaml", ledger=url, period="2024-01"
    )
    manifest = result.manifest
    assert isinstance(manifest, dp.Manifest)
    assert (manifest.format, manifest.measure, manifest.delta) == (
        "dprelease-manifest/3",
        Measure.ZCDP,
        1e-9,
    )
    assert manifest.rho_total_exact == str(Fraction(163, 1000) / 12)
    assert manifest.epsilon_total is None
    assert "discrete Gaussian" in manifest.mechanism
    with dp.Ledger(url) as ledger:
        status = ledger.status("survey")[0]
        assert (status.unit, status.spent, status.delta) == ("ρ", Fraction(163, 12000), 1e-9)
    again = dp.release(
        data, spec, privacy=zcdp_workspace / "privacy.yaml", ledger=url, period="2024-01"
    )
    assert not again.charged and again.table.equals(result.table)


def test_the_command_line_releases_in_rho_and_shows_the_unit(zcdp_workspace: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", "from dprelease.cli import main; main()", *args],
            capture_output=True,
            text=True,
            cwd=ROOT,
        )

    ledger = str(zcdp_workspace / "cli.sqlite")
    released = run(
        "release", "--spec", str(zcdp_workspace / "publish.yaml"),
        "--config", str(zcdp_workspace / "privacy.yaml"),
        "--data", str(zcdp_workspace / "visits.parquet"), "--period", "2024-02",
        "--ledger", ledger, "--out", str(zcdp_workspace / "out"),
    )  # fmt: skip
    assert released.returncode == 0, released.stderr
    manifest = json.loads((zcdp_workspace / "out" / "manifest.json").read_text())
    assert manifest["format"] == "dprelease-manifest/3" and manifest["measure"] == "zcdp"
    status = run("ledger", "status", "--ledger", ledger)
    assert status.returncode == 0, status.stderr
    assert " ρ " in status.stdout and "zCDP read at δ = 1e-09" in " ".join(status.stdout.split())
    wrong = run(
        "release", "--spec", str(zcdp_workspace / "publish.yaml"),
        "--config", str(zcdp_workspace / "privacy.yaml"), "--epsilon", "0.1",
        "--data", str(zcdp_workspace / "visits.parquet"), "--period", "2024-03",
        "--ledger", ledger, "--out", str(zcdp_workspace / "out3"),
    )  # fmt: skip
    assert wrong.returncode == 2 and wrong.stderr.count("\n") == 1
    assert "state the release's loss as rho" in wrong.stderr


def test_a_dagster_release_into_a_zcdp_scope(tmp_path: Path) -> None:
    import dagster as dg

    from pipelines.demo_data import generate_case_control, generate_visits

    confidential = tmp_path / "confidential"
    confidential.mkdir()
    generate_case_control().write_parquet(confidential / "case_control.parquet")
    generate_visits(seed=5, n_patients=1_000).write_parquet(confidential / "visits.parquet")
    privacy = tmp_path / "privacy.yaml"
    demo = (ROOT / "pipelines" / "privacy.yaml").read_text()
    assert demo.rstrip().endswith("rounding: 0.05")  # the hospital scope's section ends the file
    privacy.write_text(demo.rstrip() + "\n    measure: zcdp\n    delta: 1.0e-9\n")
    choice = choose_budget(load_privacy_profiles(privacy).for_scope("hospital_patients"))
    resources = {
        "confidential": ConfidentialStore(directory=str(confidential)),
        "public": PublicStore(directory=str(tmp_path / "public")),
        "ledger": LedgerResource(url=str(tmp_path / "ledger.sqlite")),
        "policy": PrivacyPolicy(config_path=str(privacy)),
    }
    defs = build_definitions(ROOT / "pipelines" / "specs", resources)
    result = defs.resolve_implicit_global_asset_job_def().execute_in_process(
        asset_selection=[dg.AssetKey("visits_by_clinic")],
        partition_key="2024-05",
        instance=dg.DagsterInstance.ephemeral(),
    )
    assert result.success
    manifest = json.loads(
        (tmp_path / "public" / "visits_by_clinic" / "2024-05" / "manifest.json").read_text()
    )
    assert manifest["measure"] == "zcdp"
    assert manifest["rho_total_exact"] == str(cap_from_profile(choice) / 12) == "1/80"


@pytest.mark.parametrize(
    "loss, mechanism",
    [
        (PrivacyLoss.pure(Fraction(1, 3)), Mechanism.LAPLACE),
        (PrivacyLoss.zcdp(Fraction(1, 80)), Mechanism.GAUSSIAN),
        (PrivacyLoss.zcdp(Fraction(1, 80)), Mechanism.LAPLACE),
    ],
)
def test_planned_margins_cover_95_percent_of_1000_simulated_releases(
    loss: PrivacyLoss, mechanism: Mechanism
) -> None:
    """For every measurement of the demo's monthly spec, 1,000 releases' worth of noise drawn
    by the release's own sampler: the planned 95% margin covers ≥ 95% of each cell's errors.
    Each check is a one-sided binomial test at 1e-4 (6 checks in all: family rate < 1e-3)."""
    resolved = load_spec(ROOT / "pipelines" / "specs" / "visits_monthly.yaml")
    allocation = allocate(resolved, loss, dp.ProtectedChange.ADD_REMOVE, mechanism)
    planned = dp.plan(
        ROOT / "pipelines" / "specs" / "visits_monthly.yaml",
        **({"epsilon": loss.amount} if loss.measure is Measure.PURE else {"rho": loss.amount}),
    )
    source = NoiseSource.seeded_for_tests(2024)
    stated = {s.name: s.moe95 for s in planned.statistics}
    for m in allocation.measurements:
        errors = m.draw(1000 * resolved.cells, source) * float(m.granularity)
        covered = int(np.sum(np.abs(errors) <= m.moe95))
        total = errors.size
        assert stats.binomtest(covered, total, 0.95, alternative="less").pvalue > 1e-4
        if mechanism is loss.measure.native_mechanism and m.name in stated:
            assert stated[m.name] == m.moe95  # what dp.plan states is what was simulated
        if mechanism is Mechanism.GAUSSIAN:
            assert m.sigma2_units is not None
            sigma = math.sqrt(float(m.sigma2_units)) * float(m.granularity)
            assert m.moe95 == pytest.approx(1.96 * sigma, rel=0.05)


def test_plan_compare_says_which_measure_is_more_accurate() -> None:
    """The demo's visits scope: one release of 3 statistics (3 measurements) favours pure ε;
    a year of monthly releases (36) favours zCDP, as docs/zcdp.md's crossover says."""
    spec = ROOT / "pipelines" / "specs" / "visits_monthly.yaml"
    privacy = ROOT / "pipelines" / "privacy.yaml"
    one = dp.plan(spec, privacy=privacy, compare=True, releases=1).comparison
    year = dp.plan(spec, privacy=privacy, compare=True).comparison
    assert one is not None and year is not None
    assert (one.smaller, year.releases, year.smaller) == ("pure", 12, "zcdp")


@pytest.mark.parametrize(
    ("releases", "visits", "total_cost"),
    [(12, (108, 82), (215_692.75, 164_718.5625)), (33, (297, 137), (593_155, 273_154.875))],
)
def test_the_docs_demo_margins_are_the_planners(
    releases: int, visits: tuple[float, float], total_cost: tuple[float, float]
) -> None:
    """docs/zcdp.md's ("Pure ε or zCDP?") figures for the demo's monthly spec (36 and 99
    measurements of its scope), as `dprelease plan --compare` states them: pure ε, then zCDP."""
    spec = ROOT / "pipelines" / "specs" / "visits_monthly.yaml"
    privacy = ROOT / "pipelines" / "privacy.yaml"
    comparison = dp.plan(spec, privacy=privacy, compare=True, releases=releases).comparison
    assert comparison is not None
    stated = {s.name: (s.pure_moe95, s.zcdp_moe95) for s in comparison.statistics}
    assert (stated["visits"], stated["total_cost"]) == (visits, total_cost)
