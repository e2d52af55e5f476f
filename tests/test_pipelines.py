"""The Dagster code location end to end: materializations, backfills, ledger, no leaks."""

from __future__ import annotations

import json
import shutil
from fractions import Fraction
from pathlib import Path

import dagster as dg
import polars as pl
import pytest

from dprelease.errors import SpecError
from dprelease.ledger import Ledger
from pipelines.definitions import build_definitions
from pipelines.demo_data import generate_case_control, generate_visits
from pipelines.release_specs import SPECS_DIR
from pipelines.resources import ConfidentialStore, LedgerResource, PrivacyPolicy, PublicStore

MONTHLY = "visits_by_clinic"
CAP = Fraction(3, 10)  # pipelines/privacy.yaml: ε_min = ½ ln 2 rounded down to 0.30


def write_tables(directory: Path, *, patients: int = 4_000, seed: int = 7) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    generate_case_control().write_parquet(directory / "case_control.parquet")
    generate_visits(seed=seed, n_patients=patients).write_parquet(directory / "visits.parquet")


def resources(root: Path, confidential: Path | None = None) -> dict:
    return {
        "confidential": ConfidentialStore(
            directory=str(confidential or root / "confidential"), generate_demo_data=False
        ),
        "public": PublicStore(directory=str(root / "public")),
        "ledger": LedgerResource(url=str(root / "ledger.sqlite")),
        "policy": PrivacyPolicy(config_path=str(SPECS_DIR.parent / "privacy.yaml")),
    }


@pytest.fixture
def root(tmp_path: Path) -> Path:
    write_tables(tmp_path / "confidential")
    return tmp_path


def materialize(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    selection: list[str],
    partition: str | None = None,
) -> dg.ExecuteInProcessResult:
    return dg.materialize(
        list(defs.assets),
        instance=instance,
        resources=dict(defs.resources),
        selection=selection,
        partition_key=partition,
        raise_on_error=False,
    )


def spent(root: Path, scope: str) -> tuple[Fraction, int]:
    status = Ledger(str(root / "ledger.sqlite")).status(scope)[0]
    return status.spent, status.releases


def test_definitions_load_with_jobs_schedules_and_no_retries() -> None:
    from pipelines.definitions import defs

    keys = {a.key.to_user_string() for a in defs.assets}
    assert {
        "case_control",
        "visits",
        "privacy_budget",
        MONTHLY,
        f"public/{MONTHLY}",
        "case_control_by_genotype",
        "case_control_by_region",
    } <= keys
    schedule = defs.resolve_schedule_def(f"{MONTHLY}_schedule")
    assert schedule.cron_schedule == "0 2 1 * *"
    job = defs.resolve_job_def(f"{MONTHLY}_monthly")
    assert job.tags["dagster/max_retries"] == "0"
    assert job.partitions_def.get_partition_keys()[0] == "2024-01"
    assert all(a.op.retry_policy is None for a in defs.assets)
    checks = {
        c.name for a in defs.assets if a.key.to_user_string() == MONTHLY for c in a.check_specs
    }
    assert checks == {"all_public_keys_present", "ledger_within_cap", "manifest_complete"}
    assert all(c.blocking for a in defs.assets for c in a.check_specs)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("share: 1/12", "share: 0"), r"publish\.share: .*\(0, 1\]"),
        (("share: 1/12", "share: lots"), r"publish\.share: .*fraction"),
        (("  first_period: 2024-01\n", ""), r"publish\.first_period: .*first period"),
        (("publish:", "published:"), r"a pipeline spec needs top-level 'release:' and 'publish:'"),
        (("upper: 2000", "upper: -1"), r"release\.statistics\[1\]: lower .* must be < upper"),
    ],
)
def test_bad_pipeline_specs_name_file_and_field(
    tmp_path: Path, edit: tuple[str, str], message: str
) -> None:
    specs = tmp_path / "specs"
    shutil.copytree(SPECS_DIR, specs)
    monthly = specs / "visits_monthly.yaml"
    assert edit[0] in monthly.read_text()
    monthly.write_text(monthly.read_text().replace(*edit))
    with pytest.raises(SpecError, match=rf"visits_monthly\.yaml: {message}"):
        build_definitions(specs, resources=resources(tmp_path))


def test_every_asset_materializes_and_checks_pass(root: Path) -> None:
    defs = build_definitions(resources=resources(root))
    instance = dg.DagsterInstance.ephemeral()
    graph = defs.resolve_asset_graph()
    unpartitioned = [
        k.to_user_string() for k in graph.get_all_asset_keys() if not graph.get(k).is_partitioned
    ]
    first = materialize(defs, instance, unpartitioned)
    second = materialize(defs, instance, [MONTHLY, f"public/{MONTHLY}"], "2024-03")
    assert first.success and second.success
    evaluations = first.get_asset_check_evaluations() + second.get_asset_check_evaluations()
    assert len(evaluations) == 9 and all(e.passed for e in evaluations)
    for release, period in [
        ("case_control_by_genotype", "all"),
        ("case_control_by_region", "all"),
        (MONTHLY, "2024-03"),
    ]:
        directory = root / "public" / release / period
        assert sorted(p.name for p in directory.iterdir()) == [
            "manifest.json",
            "release.csv",
            "release.parquet",
        ]
    assert {p.name for p in (root / "public/privacy_budget").iterdir()} == {
        "budget.json",
        "profile.png",
        "epsilon.png",
    }
    budget = first.asset_materializations_for_node("privacy_budget")[0].metadata
    assert budget["epsilon"].value == pytest.approx(0.30)
    assert budget["epsilon_min"].value == pytest.approx(0.3466, abs=1e-4)
    assert "data:image/png;base64," in budget["report"].value
    by_region = pl.read_csv(root / "public/case_control_by_region/all/release.csv")
    assert by_region.height == 16 and "Islands" in by_region.get_column("region").to_list()
    assert spent(root, "case_control_study") == (CAP, 2)


def test_backfill_charges_each_month_once_and_rerun_returns_stored(root: Path) -> None:
    """A backfill launches one run per month; we run the same three runs in-process."""
    defs = build_definitions(resources=resources(root))
    instance = dg.DagsterInstance.ephemeral()
    selection = [MONTHLY, f"public/{MONTHLY}"]
    for month in ("2024-01", "2024-02", "2024-03"):
        assert materialize(defs, instance, selection, month).success
    assert spent(root, "hospital_patients") == (3 * CAP / 12, 3)
    directory = root / "public" / MONTHLY / "2024-02"
    before = {p.name: p.read_bytes() for p in directory.iterdir()}
    again = materialize(defs, instance, selection, "2024-02")
    assert again.success
    metadata = again.asset_materializations_for_node(MONTHLY)[0].metadata
    assert metadata["charged"].value is False and metadata["ledger_status"].value == "committed"
    assert {p.name: p.read_bytes() for p in directory.iterdir()} == before
    assert spent(root, "hospital_patients") == (3 * CAP / 12, 3)


def test_exhausted_budget_fails_the_month_writes_nothing_keeps_earlier(root: Path) -> None:
    specs = root / "specs"
    shutil.copytree(SPECS_DIR, specs)
    monthly = specs / "visits_monthly.yaml"
    monthly.write_text(monthly.read_text().replace("share: 1/12", "share: 1/3"))
    defs = build_definitions(specs, resources=resources(root))
    instance = dg.DagsterInstance.ephemeral()
    selection = [MONTHLY, f"public/{MONTHLY}"]
    for month in ("2024-01", "2024-02", "2024-03"):
        assert materialize(defs, instance, selection, month).success
    january = {p.name: p.read_bytes() for p in (root / "public" / MONTHLY / "2024-01").iterdir()}
    refused = materialize(defs, instance, selection, "2024-04")
    assert not refused.success
    failure = refused.get_step_failure_events()[0].event_specific_data.error.to_string()
    assert "privacy budget exhausted for scope 'hospital_patients'" in failure
    assert "remaining 0" in failure
    assert not (root / "public" / MONTHLY / "2024-04").exists()
    assert {
        p.name: p.read_bytes() for p in (root / "public" / MONTHLY / "2024-01").iterdir()
    } == january
    assert spent(root, "hospital_patients") == (CAP, 3)


def test_a_failing_check_blocks_publication(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The release is recorded, but with an incomplete manifest no public file is written."""
    import pipelines.assets

    monkeypatch.setattr(pipelines.assets, "manifest_problems", lambda manifest: ["missing ci95"])
    defs = build_definitions(resources=resources(root))
    result = materialize(
        defs, dg.DagsterInstance.ephemeral(), [MONTHLY, f"public/{MONTHLY}"], "2024-06"
    )
    failed = {e.check_name for e in result.get_asset_check_evaluations() if not e.passed}
    assert failed == {"manifest_complete"}
    assert not result.success
    assert not result.asset_materializations_for_node(f"public__{MONTHLY}")
    assert not (root / "public" / MONTHLY).exists()


def _published(root: Path, confidential: Path) -> tuple[dict, dict]:
    """Metadata of every materialization and every published manifest, for one dataset."""
    defs = build_definitions(resources=resources(root, confidential))
    instance = dg.DagsterInstance.ephemeral()
    graph = defs.resolve_asset_graph()
    unpartitioned = [
        k.to_user_string() for k in graph.get_all_asset_keys() if not graph.get(k).is_partitioned
    ]
    runs = [
        materialize(defs, instance, unpartitioned),
        materialize(defs, instance, [MONTHLY, f"public/{MONTHLY}"], "2024-05"),
    ]
    metadata = {}
    for run in runs:
        assert run.success
        for event in run.get_asset_materialization_events():
            m = event.materialization
            metadata[m.asset_key.to_user_string()] = {k: v.value for k, v in m.metadata.items()}
    manifests = {
        str(p.relative_to(root / "public")): json.loads(p.read_text())
        for p in (root / "public").rglob("manifest.json")
    }
    return metadata, manifests


def _public_facts(metadata: dict, manifests: dict) -> tuple[dict, dict]:
    """Drop what legitimately differs between two runs: noisy values, times, local paths."""
    noisy_or_local = {"preview", "manifest", "path", "directory", "plots"}
    facts = {
        asset: {k: v for k, v in values.items() if k not in noisy_or_local}
        for asset, values in metadata.items()
    }
    for asset, values in metadata.items():
        if "manifest" in values:
            facts[asset]["manifest"] = {
                k: v for k, v in values["manifest"].items() if k != "created_at"
            }
    return facts, {
        name: {k: v for k, v in m.items() if k != "created_at"} for name, m in manifests.items()
    }


def test_published_metadata_and_manifests_reveal_nothing_about_the_data(tmp_path: Path) -> None:
    """Two different confidential datasets, same specs: every published fact is identical."""
    write_tables(tmp_path / "a_data", patients=3_000, seed=1)
    write_tables(tmp_path / "b_data", patients=9_000, seed=2)
    a = _public_facts(*_published(tmp_path / "a", tmp_path / "a_data"))
    b = _public_facts(*_published(tmp_path / "b", tmp_path / "b_data"))
    assert a == b
    metadata, _ = a
    assert set(metadata["visits"]) == {"dagster/column_schema"}  # no row counts, no ranges
    # the published files are the ledger's stored (noisy) release, byte for byte
    release_id = metadata[MONTHLY]["release_id"]
    stored = Ledger(str(tmp_path / "a/ledger.sqlite")).stored_release(release_id)
    published = tmp_path / "a/public" / MONTHLY / "2024-05/release.parquet"
    assert stored is not None and published.read_bytes() == stored.table_parquet
