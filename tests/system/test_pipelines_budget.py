"""The blocking checks and the caps (`pipelines/assets.py`): a check withholds files for a real
reason; the ledger's cap against the profile, after `set-cap`."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import closing
from fractions import Fraction
from pathlib import Path

import dagster as dg
import pytest
from helpers import (
    MONTHLY,
    PRIVACY,
    SCOPE,
    VISITS_CAP,
    failure,
    materialize,
    record_unpublished,
    resources,
    spent,
    stored_with_a_cut_table,
)

from dprelease.ledger import Ledger
from dprelease.mechanism.noise import NoiseSource
from pipelines.definitions import build_definitions


def _stored_without_a_cell(root: Path, period: str) -> None:
    stored_with_a_cut_table(root, period, lambda table: table.slice(1))


def _stored_with_seeded_noise(root: Path, period: str) -> None:
    """A release drawn with the seeded test noise source (allowed by its caller) is stored: its
    manifest says its noise is not private."""
    record_unpublished(root, period, noise=NoiseSource.seeded_for_tests(1), allow_unsafe_noise=True)


def _stored_then_overspent(root: Path, period: str) -> None:
    """A ledger that has spent more than any cap it had: a charge edited by hand to ε = 5."""
    charge = record_unpublished(root, period).stored.charge_id
    with closing(sqlite3.connect(root / "ledger.sqlite")) as db, db:
        db.execute("UPDATE dprelease_charges SET epsilon = '5' WHERE charge_id = ?", (charge,))


@pytest.mark.parametrize(
    ("check", "store", "why"),
    [
        ("all_public_keys_present", _stored_without_a_cell, {"released_cells": 31}),
        ("ledger_within_cap", _stored_then_overspent, {"spent": "5", "highest_cap": "4"}),
        (
            "manifest_complete",
            _stored_with_seeded_noise,
            {"problems": "noise source is seeded: not a private release"},
        ),
    ],
)
def test_each_blocking_check_withholds_the_files_for_a_real_reason(
    root: Path, check: str, store: Callable[[Path, str], None], why: dict[str, object]
) -> None:
    """The ledger holds a month that fails one check: its run publishes nothing, charges
    nothing, fails only that check, and says why in the check's metadata."""
    store(root, "2024-06")
    before = spent(root, SCOPE)
    defs = build_definitions(resources=resources(root))
    result = materialize(defs, dg.DagsterInstance.ephemeral(), [MONTHLY], "2024-06")
    assert not result.success
    evaluations = result.get_asset_check_evaluations()
    assert {e.check_name for e in evaluations if not e.passed} == {check}
    failed = next(e for e in evaluations if e.check_name == check)
    assert {k: failed.metadata[k].value for k in why} == why
    metadata = result.asset_materializations_for_node(MONTHLY)[0].metadata
    assert metadata["charged"].value is False
    assert metadata["published"].value == f"no: check(s) {check} failed; files withheld"
    assert not (root / "public" / MONTHLY).exists()
    assert spent(root, SCOPE) == before


def test_a_stricter_profile_refuses_new_months_until_set_cap(root: Path) -> None:
    """The ledger's cap is the source of truth but never above the profile's ε: after the
    profile shrinks, new months are refused (nothing charged) until the cap is lowered on
    purpose; a released month re-runs from the stored copy whatever the cap."""
    defs = build_definitions(resources=resources(root))
    instance = dg.DagsterInstance.ephemeral()
    assert materialize(defs, instance, [MONTHLY], "2024-01").success
    strict = root / "strict.yaml"
    strict.write_text(PRIVACY.read_text().replace("[1, 3000]", "[1, 400]"))  # ½ ln 400 → 2.95
    defs = build_definitions(resources=resources(root, privacy=strict))
    refused = materialize(defs, instance, [MONTHLY], "2024-02")
    assert not refused.success
    assert failure(refused) == (
        "visits_by_clinic 2024-02: budget scope 'hospital_patients' has cap ε = 4 in the ledger, "
        "more than the privacy profile allows (ε = 2.95); nothing was spent. Lower it with "
        "`dprelease ledger set-cap hospital_patients 2.95 --reason TEXT`, or change the profile"
    )
    assert materialize(defs, instance, [MONTHLY], "2024-01").success
    budget = materialize(defs, instance, ["privacy_budget"])
    scopes = budget.asset_materializations_for_node("privacy_budget")[0].metadata["scopes"]
    cap = next(
        r.data["cap"] for r in scopes.value.records if r.data["scope"] == "hospital_patients"
    )
    assert cap == "ε = 4 (profile: 2.95)"
    report = budget.asset_materializations_for_node("privacy_budget")[0].metadata["report"]
    note = report.value.split("## Scope `hospital_patients`")[1]
    assert "new releases are refused until `dprelease ledger set-cap" in note
    assert spent(root, SCOPE) == (VISITS_CAP / 12, 1)


def test_set_cap_lower_then_rerun_released_months_charges_nothing(root: Path) -> None:
    defs = build_definitions(resources=resources(root))
    instance = dg.DagsterInstance.ephemeral()
    for month in ("2024-01", "2024-02"):
        assert materialize(defs, instance, [MONTHLY], month).success
    with Ledger(str(root / "ledger.sqlite")) as book:
        book.set_cap(SCOPE, Fraction(3), reason="board decision")
    for month in ("2024-01", "2024-02"):
        again = materialize(defs, instance, [MONTHLY], month)
        assert again.success
        metadata = again.asset_materializations_for_node(MONTHLY)[0].metadata
        assert metadata["charged"].value is False
        words = metadata["ledger"].value
        assert words.startswith("already released on ") and "nothing charged" in words
        assert words.endswith(
            "(stored with ε = 1/3 ≈ 0.333; this run asked for ε = 0.25: a release at that ε needs "
            "run config force_new: true and is charged)"
        )
    assert spent(root, SCOPE) == (2 * VISITS_CAP / 12, 2)
    new = materialize(defs, instance, [MONTHLY], "2024-03")
    assert new.asset_materializations_for_node(MONTHLY)[0].metadata["epsilon"].value == "0.25"
    assert spent(root, SCOPE) == (2 * VISITS_CAP / 12 + Fraction(1, 4), 3)
    budget = materialize(defs, instance, ["privacy_budget"])
    history = budget.asset_materializations_for_node("privacy_budget")[0].metadata["cap_changes"]
    assert "cap ε = 4 -> 3; reason: board decision" in history.value


def test_a_cap_lowered_below_what_was_spent_refuses_new_months_not_released_ones(
    root: Path,
) -> None:
    defs = build_definitions(resources=resources(root))
    instance = dg.DagsterInstance.ephemeral()
    for month in ("2024-01", "2024-02"):
        assert materialize(defs, instance, [MONTHLY], month).success
    with Ledger(str(root / "ledger.sqlite")) as book:
        book.set_cap(SCOPE, Fraction(1, 2), reason="no more releases")  # spent: 2/3
    again = materialize(defs, instance, [MONTHLY], "2024-01")
    assert again.success and all(e.passed for e in again.get_asset_check_evaluations())
    refused = materialize(defs, instance, [MONTHLY], "2024-03")
    assert not refused.success
    assert failure(refused).startswith(
        "visits_by_clinic 2024-03: privacy budget exhausted for scope 'hospital_patients': "
        "spent ε = 2/3 ≈ 0.667 of cap 0.5, requested 1/24 ≈ 0.0417"
    )
    assert spent(root, SCOPE) == (2 * VISITS_CAP / 12, 2)
