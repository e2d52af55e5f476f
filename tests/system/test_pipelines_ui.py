"""The Dagster code location as an operator sees it, in process: metadata in exact, readable
amounts, a refusal as one message, a privacy budget that follows the releases, and the budget
report at the cap in force (issue 18, "The Dagster UI, as an operator saw it")."""

from __future__ import annotations

import math
import re
from fractions import Fraction
from pathlib import Path
from typing import Any

import dagster as dg
import polars as pl
import pytest
from helpers import (
    MONTHLY,
    PRIVACY,
    SCOPE,
    materialize,
    resources,
    spent,
)

from dprelease.ledger import Ledger
from pipelines.definitions import build_definitions
from pipelines.resources import ConfidentialStore

#: A double printed whole (0.3333333333333333, 3.6666666666666665): never shown to an operator.
RAW_FLOAT = re.compile(r"\d\.\d{7,}")
#: A whole number as people read it: 7, 190,000, 15,870,000.
THOUSANDS = re.compile(r"-?\d{1,3}(,\d{3})*")
#: A whole number printed as a float in a table cell (| 108.0 |).
WHOLE_FLOAT_CELL = re.compile(r"\|\s*-?\d+\.0\s*(?=\|)")


def _values(metadata: dict[str, dg.MetadataValue]) -> dict[str, Any]:
    return {key: value.value for key, value in metadata.items()}


def _texts(value: Any) -> list[str]:
    """Every piece of text an operator reads in a metadata value (a table's cells included)."""
    if isinstance(value, dg.TableMetadataValue):
        return [str(cell) for record in value.records for cell in record.data.values()]
    if isinstance(value, dg.MetadataValue):
        return _texts(value.value)
    return [str(value)]


def test_metadata_shows_exact_amounts_and_whole_numbers(root: Path) -> None:
    """ε, the scope's cap, spent and remaining as exact amounts with a rounded decimal; margins
    (and every released number) that are whole as integers with thousands separators; in every
    asset's and check's metadata. The manifest keeps its JSON numbers."""
    defs = build_definitions(resources=resources(root))
    instance = dg.DagsterInstance.ephemeral()
    month = materialize(defs, instance, [MONTHLY], "2024-03")
    budget = materialize(defs, instance, ["privacy_budget"])
    metadata = _values(month.asset_materializations_for_node(MONTHLY)[0].metadata)
    assert metadata["epsilon"] == "1/3 ≈ 0.333"
    assert (metadata["scope_cap"], metadata["scope_spent"]) == ("4", "1/3 ≈ 0.333")
    assert metadata["scope_remaining"] == "11/3 ≈ 3.67"
    assert metadata["manifest"]["epsilon_total"] == 1 / 3  # the manifest stays as it is
    header, *rows = [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in metadata["preview"].splitlines()
        if line.startswith("|") and not line.startswith("|---")
    ]
    margins = {row[header.index("visits_moe95")] for row in rows}
    assert margins == {"108"}  # the demo's count margin (docs/dagster.md), not 108.0
    cost_margins = {row[header.index("total_cost_moe95")] for row in rows}
    assert cost_margins == {"220,000"}  # thousands separated (docs/dagster.md's ± 220,000)
    costs = [row[header.index("total_cost")] for row in rows]
    assert all(THOUSANDS.fullmatch(cost) for cost in costs), costs
    assert any("," in cost for cost in costs)
    assert WHOLE_FLOAT_CELL.search(metadata["preview"]) is None
    within = next(
        e for e in month.get_asset_check_evaluations() if e.check_name == "ledger_within_cap"
    )
    assert _values(within.metadata) == {
        "spent": "1/3 ≈ 0.333",
        "cap": "4",
        "highest_cap": "4",
    }
    shown = budget.asset_materializations_for_node("privacy_budget")[0].metadata
    scopes = {r.data["scope"]: r.data for r in shown["scopes"].value.records}
    visits = scopes["hospital_patients"]
    assert visits["cap"] == "ε = 4"  # the ledger's, as the profile allows
    assert (visits["spent"], visits["remaining"]) == ("1/3 ≈ 0.333", "11/3 ≈ 3.67")
    assert scopes["case_control_study"]["cap"] == "ε = 0.3 (new)"  # not in the ledger yet
    report = shown["report"].value
    assert "ε_min = 4.0032" in report and "ε_min = 0.3466" in report  # ½ ln 3000, ½ ln 2
    shown_texts = [
        text
        for result in (month, budget)
        for event in result.get_asset_materialization_events()
        for key, value in event.materialization.metadata.items()
        if key != "manifest"
        for text in _texts(value)
    ] + [text for e in month.get_asset_check_evaluations() for v in e.metadata.values()
         for text in _texts(v)]  # fmt: skip
    for text in shown_texts:
        visible = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "", text)
        assert RAW_FLOAT.search(visible) is None, visible


def test_a_refusal_is_one_message_with_its_facts_and_no_stack(root: Path) -> None:
    """A refused month fails its step with the message alone: no Python stack (Dagster's frames
    and the one raise say nothing to an operator), no class name before it, its facts as the
    failure's metadata; the run's failure carries the same one message."""
    defs = build_definitions(resources=resources(root))
    instance = dg.DagsterInstance.ephemeral()
    assert materialize(defs, instance, [MONTHLY], "2024-01").success
    with Ledger(str(root / "ledger.sqlite")) as book:
        book.set_cap(SCOPE, Fraction(1, 4), reason="no more months")  # spent: 1/3
    refused = materialize(defs, instance, [MONTHLY], "2024-02")
    assert not refused.success
    message = (
        "visits_by_clinic 2024-02: privacy budget exhausted for scope 'hospital_patients': "
        "spent ε = 1/3 ≈ 0.333 of cap 0.25, requested 1/48 ≈ 0.0208, remaining 0; nothing was "
        "charged. The "
        "scope composes sequentially: what it has spent never comes back, and a new period "
        "draws on the same cap. To go on, raise the scope's cap on purpose: `dprelease ledger "
        "set-cap hospital_patients CAP --reason TEXT`."
    )
    [step] = refused.get_step_failure_events()
    failed = step.step_failure_data
    assert (failed.error.message, failed.error.stack) == (message, [])
    assert failed.error.cause is None and failed.error.context is None
    assert failed.user_failure_data is not None
    assert failed.user_failure_data.description == message
    assert _values(failed.user_failure_data.metadata) == {
        "release": MONTHLY,
        "period": "2024-02",
        "scope": SCOPE,
        "refused": "BudgetExhausted",
        "spent": "1/3 ≈ 0.333",
        "cap": "0.25",
        "requested": "1/48 ≈ 0.0208",
        "remaining": "0",
    }
    [run] = [e for e in refused.all_events if e.event_type == dg.DagsterEventType.RUN_FAILURE]
    assert run.job_failure_data.error == failed.error
    assert spent(root, SCOPE) == (Fraction(1, 3), 1)


def test_a_missing_confidential_table_is_a_refusal_too(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/dagster.md's refusal table lists it: one message, no stack, nothing charged; the path it
    names is absolute even when the store's directory is relative (the demo's default)."""
    (root / "confidential" / "visits.parquet").unlink()
    monkeypatch.chdir(root)
    defs = build_definitions(
        resources={**resources(root), "confidential": ConfidentialStore(directory="confidential")}
    )
    refused = materialize(defs, dg.DagsterInstance.ephemeral(), [MONTHLY], "2024-01")
    [step] = refused.get_step_failure_events()
    error = step.step_failure_data.error
    assert error.stack == []
    assert error.message == (
        f"visits_by_clinic 2024-01: confidential table 'visits' not found at "
        f"{root / 'confidential' / 'visits.parquet'}; put it there, or set "
        "DPRELEASE_CONFIDENTIAL_DIR to the directory that holds it"
    )
    assert not (root / "ledger.sqlite").exists()  # refused before the ledger is opened


def _requested(defs: dg.Definitions, instance: dg.DagsterInstance, cursor: Any = None) -> Any:
    """One tick of the code location's automation: the assets it asks to materialize."""
    return dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=cursor)


def _budget_spent(result: dg.ExecuteInProcessResult, scope: str) -> str:
    table = result.asset_materializations_for_node("privacy_budget")[0].metadata["scopes"].value
    return str(next(r.data["spent"] for r in table.records if r.data["scope"] == scope))


# Dagster's own test helper selects assets with a beta parameter; nothing of ours is in beta.
@pytest.mark.filterwarnings("ignore:Parameter `include_sources`:dagster.BetaWarning")
def test_the_privacy_budget_follows_the_releases(root: Path) -> None:
    """After a release is materialized (whoever launched it) the automation asks for the privacy
    budget once, so it shows what the ledger spent without anyone materializing it by hand; a
    refused month, which spends nothing, asks for nothing."""
    defs = build_definitions(resources=resources(root))
    sensor = defs.resolve_sensor_def("privacy_budget_follows_releases")
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING  # on in `dg dev` as shipped
    assert isinstance(sensor, dg.AutomationConditionSensorDefinition)
    assert sensor.run_tags["dagster/max_retries"] == "0"  # as every job of the location
    budget = dg.AssetKey("privacy_budget")
    assert defs.resolve_asset_graph().get(budget).parent_keys >= {dg.AssetKey(MONTHLY)}
    instance = dg.DagsterInstance.ephemeral()
    tick = _requested(defs, instance)
    assert tick.total_requested == 0  # nothing released yet: nothing to follow
    assert materialize(defs, instance, [MONTHLY], "2024-03").success
    tick = _requested(defs, instance, tick.cursor)
    assert tick.get_num_requested(budget) == tick.total_requested == 1
    followed = materialize(defs, instance, ["privacy_budget"])  # the run the tick asks for
    assert _budget_spent(followed, SCOPE) == "1/3 ≈ 0.333"
    tick = _requested(defs, instance, tick.cursor)
    assert tick.total_requested == 0  # handled: once per update
    with Ledger(str(root / "ledger.sqlite")) as book:
        book.set_cap(SCOPE, Fraction(1, 4), reason="no more months")
    assert not materialize(defs, instance, [MONTHLY], "2024-04").success
    assert _requested(defs, instance, tick.cursor).total_requested == 0
    assert materialize(defs, instance, ["case_control_by_genotype"]).success
    assert _requested(defs, instance, tick.cursor).get_num_requested(budget) == 1


def test_the_budget_report_is_at_the_cap_in_force_after_set_cap(root: Path) -> None:
    """After `dprelease ledger set-cap hospital_patients 1.5 …` the budget asset headlines the
    ledger's cap, with the profile's ε = 4 beside it, and its tables, plot legend and
    budget.json are at 1.5."""
    defs = build_definitions(resources=resources(root))
    instance = dg.DagsterInstance.ephemeral()
    assert materialize(defs, instance, [MONTHLY], "2024-01").success
    with Ledger(str(root / "ledger.sqlite")) as book:
        book.set_cap(SCOPE, Fraction(3, 2), reason="board decision")
    budget = materialize(defs, instance, ["privacy_budget"])
    report = budget.asset_materializations_for_node("privacy_budget")[0].metadata["report"]
    visits = report.value.split("## Scope `hospital_patients`")[1]
    assert "Cap 1.5 (the profile would allow 4;" in visits
    assert (
        "Cap in force: ε = 1.5, the ledger's, at which the tables are; the profile allows ε = 4 "
        "(ε_min = 4.0032, rounded down to a multiple of 0.05)"
    ) in visits
    assert "| 1 | 1.5 | 20.09 |" in visits  # household of one: exp(2 · 1.5)
    assert "ε = 4 (ε_min" not in visits.replace("allows ε = 4 (ε_min", "")
    stated = (root / "public/privacy_budget" / SCOPE / "budget.json").read_text()
    assert '"cap_in_force": 1.5' in stated


def test_a_zcdp_scope_shows_rho_max_its_probability_and_amounts_in_rho(root: Path) -> None:
    """A scope whose profile says `measure: zcdp` (a config of the test's own: the demo's
    releases are pure ε): its release states ρ, not ε; its budget shows ρ_max beside ε_min,
    the odds statement with its probability, tables that say so, and the ε of (ε, δ)-DP that
    the spent ρ implies; the other scope stays pure."""
    privacy = root / "privacy.yaml"
    privacy.write_text(
        PRIVACY.read_text().replace(
            "  hospital_patients:\n", "  hospital_patients:\n    measure: zcdp\n    delta: 1.0e-9\n"
        )
    )
    defs = build_definitions(resources=resources(root, privacy=privacy))
    instance = dg.DagsterInstance.ephemeral()
    month = materialize(defs, instance, [MONTHLY], "2024-05")
    released = _values(month.asset_materializations_for_node(MONTHLY)[0].metadata)
    assert (released["rho"], released["measure"]) == ("0.0125", "ρ-zCDP (ρ), δ = 1e-09")
    assert "epsilon" not in released  # 1/80 is a ρ: ρ_max ≈ 0.163 rounded down to 0.15, / 12
    assert (released["scope_cap"], released["scope_spent"]) == ("0.15", "0.0125")
    budget = materialize(defs, instance, ["privacy_budget"])
    shown = budget.asset_materializations_for_node("privacy_budget")[0].metadata
    scopes = {r.data["scope"]: r.data for r in shown["scopes"].value.records}
    tail = math.log(1e9)
    rho_max = ((math.sqrt(tail + math.log(3000)) - math.sqrt(tail)) / 2) ** 2  # B = 3000 at P10 = 1
    visits = scopes["hospital_patients"]
    # ρ_max rounded down, in the ledger as the profile allows
    assert visits["cap"] == "ρ = 0.15, δ = 1e-09"
    implied = 1 / 80 + 2 * math.sqrt(tail / 80)  # ρ + 2√(ρ·ln(1/δ)) at the spent ρ
    assert visits["spent"] == f"0.0125 (ε ≈ {implied:.4g})"
    study = scopes["case_control_study"]
    assert (study["cap"], study["spent"]) == ("ε = 0.3 (new)", "0")
    report = shown["report"].value.split("## Scope `hospital_patients`")[1]
    assert (
        f"ρ = 0.15 (ρ_max = {rho_max:.4g}, rounded down to a multiple of 0.05) under ρ-zCDP "
        "with δ = 1e-09, beside ε_min = 4.0032"
    ) in report
    assert "With probability at least 1 − δ over the release, an adversary's posterior" in report
    assert "| ρ_P10 | max posterior odds ratio at ρ, with probability ≥ 1 − δ |" in report
    assert "| group size k | k²ρ | odds factor, with probability ≥ 1 − δ |" in report


def test_a_first_run_refused_for_its_input_leaves_no_new_ledger(root: Path) -> None:
    """Every check comes before the ledger file is created: a refused first run of a pipeline
    (here a text column where the spec sums numbers) writes no ledger, not even an empty one."""
    table = root / "confidential" / "visits.parquet"
    visits = pl.read_parquet(table)
    visits.with_columns(pl.col("cost").cast(pl.String)).write_parquet(table)
    defs = build_definitions(resources=resources(root))
    refused = materialize(defs, dg.DagsterInstance.ephemeral(), [MONTHLY], "2024-01")
    [step] = refused.get_step_failure_events()
    assert "column 'cost'" in step.step_failure_data.error.message
    assert not (root / "ledger.sqlite").exists()
    visits.write_parquet(table)  # the same run on good data creates the ledger and charges once
    released = materialize(defs, dg.DagsterInstance.ephemeral(), [MONTHLY], "2024-01")
    assert released.success and (root / "ledger.sqlite").exists()
