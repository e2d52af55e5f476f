"""Local DP in the Dagster code location: the wave asset charges its ε once, the release asset
ingests the wave's randomized answers and publishes them uncharged, and refuses when the wave
is not recorded."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import dagster as dg
import polars as pl
import pytest

from dprelease.ledger import Ledger
from pipelines.definitions import build_definitions
from pipelines.local_dp import (
    LOCAL_SPECS_DIR,
    load_local_specs,
    local_assets,
    wave_key,
    write_local_demo_data,
)
from pipelines.resources import ConfidentialStore, LedgerResource, PrivacyPolicy, PublicStore

PRIVACY = LOCAL_SPECS_DIR.parent / "privacy.yaml"
WAVE = "wave_drug_use_2025_06"
RELEASE = "drug_use_by_region"


def resources(root: Path) -> dict[str, dg.ConfigurableResource]:
    return {
        "confidential": ConfidentialStore(
            directory=str(root / "confidential"), generate_demo_data=True
        ),
        "public": PublicStore(directory=str(root / "public")),
        "ledger": LedgerResource(url=str(root / "ledger.sqlite")),
        "policy": PrivacyPolicy(config_path=str(PRIVACY)),
    }


def materialize(root: Path, selection: list[str]) -> dg.ExecuteInProcessResult:
    defs = build_definitions(resources=resources(root))
    return dg.materialize(
        [a for a in defs.assets if isinstance(a, dg.AssetsDefinition)],
        instance=dg.DagsterInstance.ephemeral(),
        resources=dict(defs.resources),
        selection=selection,
        raise_on_error=False,
    )


def test_the_code_location_has_the_local_assets() -> None:
    from pipelines.definitions import defs

    keys = {key.to_user_string() for key in defs.resolve_asset_graph().get_all_asset_keys()}
    assert {WAVE, RELEASE, "drug_use_answers"} <= keys
    [(spec, release)] = load_local_specs()
    assert wave_key(spec) == WAVE and release.spec.name == RELEASE


def test_a_wave_is_charged_once_and_its_answers_released_uncharged(tmp_path: Path) -> None:
    first = materialize(tmp_path, [WAVE])
    assert first.success
    with Ledger(str(tmp_path / "ledger.sqlite")) as book:
        status = book.status("survey_respondents")[0]
    assert status.spent == Fraction(1, 4)  # the wave's ε, within the default profile's cap 0.3
    assert status.cap == Fraction(3, 10)
    again = materialize(tmp_path, [WAVE])
    metadata = again.asset_materializations_for_node(WAVE)[0].metadata
    assert metadata["charged"].value is False
    released = materialize(tmp_path, [RELEASE])
    assert released.success
    with Ledger(str(tmp_path / "ledger.sqlite")) as book:
        assert book.status("survey_respondents")[0].spent == Fraction(1, 4)
    out = tmp_path / "public" / RELEASE / "all"
    manifest = json.loads((out / "manifest.json").read_text())  # the central manifest
    assert manifest["format"] == "dprelease-manifest/2" and manifest["ledger"]["recorded"]
    assert manifest["epsilon_total_exact"] == "0" and manifest["neighbours"] == "answer"
    [entry] = manifest["statistics"]
    assert entry["kind"] == "randomized" and entry["charged"].startswith("nothing")
    metadata = released.asset_materializations_for_node(RELEASE)[0].metadata
    assert metadata["charged"].value is False
    table = pl.read_parquet(out / "release.parquet")
    assert table.height == 4 + 1  # 4 regions and the total, one column per answer
    totals = table.filter(pl.col("level") == "total")
    assert totals["drug_use_respondents"].to_list() == [40_000]
    answers = ["never", "once", "monthly", "weekly"]
    # projected to sum to the respondents, then each integer-rounded: within k − 1 of them
    assert abs(sum(totals[f"drug_use_{a}"][0] for a in answers) - 40_000) <= len(answers) - 1
    answers = pl.read_parquet(tmp_path / "confidential" / "drug_use_answers.parquet")
    assert set(answers["drug_use"].unique()) <= {"never", "once", "monthly", "weekly"}


def test_the_privacy_budget_lists_a_wave_scope_with_its_epsilon_and_terms(tmp_path: Path) -> None:
    """privacy_budget follows the wave assets and lists their scope: ε spent, and the terms it
    keeps (answer neighbours: who answered is public)."""
    defs = build_definitions(resources=resources(tmp_path))
    budget = defs.resolve_assets_def("privacy_budget")
    assert dg.AssetKey(WAVE) in budget.dependency_keys
    result = materialize(tmp_path, [WAVE, "privacy_budget"])
    assert result.success
    metadata = result.asset_materializations_for_node("privacy_budget")[0].metadata
    [row] = [r for r in metadata["scopes"].value.records if r.data["scope"] == "survey_respondents"]
    assert row.data["spent"] == "0.25" and row.data["releases"] == "1"
    report = metadata["report"].value
    section = report[report.index("## Scope `survey_respondents`") :]
    assert "Kept for life: sequential; ε (pure); local-DP waves: answer neighbours" in section


def test_a_release_whose_wave_is_not_recorded_is_refused(tmp_path: Path) -> None:
    result = materialize(tmp_path, [RELEASE])
    assert not result.success
    error = result.get_step_failure_events()[0].event_specific_data.error.message
    assert "no wave of this release is recorded" in error
    assert not (tmp_path / "public" / RELEASE).exists()


def test_a_release_refused_by_its_reports_leaves_no_reservation(tmp_path: Path) -> None:
    """Malformed reports refuse the release asset before the ledger is touched: no open
    reservation (the next run a plain release, not one that took over), no file."""
    assert materialize(tmp_path, [WAVE]).success
    [(spec, release)] = load_local_specs()
    table = tmp_path / "confidential" / "drug_use_answers.parquet"
    write_local_demo_data(spec, release, table)
    good = pl.read_parquet(table)
    good.with_columns(
        pl.when(pl.int_range(pl.len()) == 7).then(pl.lit("sometimes")).otherwise("drug_use")
        .alias("drug_use")
    ).write_parquet(table)  # fmt: skip
    refused = materialize(tmp_path, [RELEASE])
    assert not refused.success
    error = refused.get_step_failure_events()[0].event_specific_data.error.message
    assert "column 'drug_use' holds reports that are not krr reports" in error
    assert not (tmp_path / "public" / RELEASE).exists()
    with Ledger(str(tmp_path / "ledger.sqlite")) as book:
        assert book.status("survey_respondents")[0].open_reservations == 0
    good.write_parquet(table)
    released = materialize(tmp_path, [RELEASE])
    assert released.success
    metadata = released.asset_materializations_for_node(RELEASE)[0].metadata
    assert "charged nothing" in metadata["ledger"].value
    assert "took over" not in metadata["ledger"].value


def test_a_bad_local_spec_names_its_file(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text(
        "wave: {id: Bad, question: q, domain: [a, b], epsilon: 1, scope: s}\nrelease: {name: r, "
        "source: t}\n"
    )
    from dprelease.errors import SpecError

    with pytest.raises(SpecError, match=r"bad.yaml: wave.id"):
        local_assets(tmp_path)
