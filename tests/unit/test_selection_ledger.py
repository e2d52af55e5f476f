"""Key selection's δ in the ledger (schema 5, review S1 and S3): a budget of its own, kept by the
scope for life, separate from the δ a zCDP scope's ρ is read at; each charge records the δ it
spends (its loss's share of the cap), and a charge past the budget is refused before anything is
charged or drawn."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest
from sqlalchemy import select
from test_selection_release import spec, visits

import dprelease as dp
from dprelease.errors import ConfigError, LedgerError, SpecError
from dprelease.ledger import Ledger
from dprelease.ledger.schema import charges

DELTA = Fraction(1, 10**9)


def charged_deltas(ledger: Ledger) -> list[str | None]:
    with ledger._db.tx() as conn:
        return list(
            conn.execute(select(charges.c.selection_delta).order_by(charges.c.charge_id)).scalars()
        )


def test_each_release_charges_its_share_of_the_scopes_selection_delta(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger(url) as ledger:
        first = dp.release(
            visits(), spec(), epsilon=1, cap=2, ledger=ledger, selection_delta="1/1000000000"
        )
        assert first.charged and ledger.selection_delta("dx_counts") == DELTA
        # the scope keeps its δ: the next release need not state it, and spends its share
        dp.release(visits(), spec(), epsilon="1/2", ledger=ledger, force_new=True)
        assert charged_deltas(ledger) == ["1/2000000000", "1/4000000000"]
        (entry,) = first.manifest.selections or []
        assert entry.delta_spent_exact == "1/2000000000"
        assert first.manifest.selection_delta == pytest.approx(5e-10)


def test_a_stated_delta_other_than_the_scopes_is_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger(url) as ledger:
        dp.release(visits(), spec(), epsilon=1, cap=2, ledger=ledger, selection_delta=1e-9)
        with pytest.raises(ConfigError, match="keeps a selection δ of 0.000000001 for life"):
            dp.release(
                visits(), spec(), epsilon=1, ledger=ledger, force_new=True, selection_delta=1e-6
            )
        assert len(charged_deltas(ledger)) == 1


def test_a_scope_without_a_selection_delta_refuses_selection_in_one_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger(url) as ledger, pytest.raises(SpecError) as caught:
        dp.release(visits(), spec(), epsilon=1, cap=2, ledger=ledger)
    assert "give selection_delta" in str(caught.value) and "\n" not in str(caught.value)
    with Ledger(url, mode="existing") as ledger:
        assert ledger.status() == []  # nothing charged, no scope made


def test_a_charge_past_the_delta_budget_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    """Review S3: the ledger refuses a δ that does not fit, before anything is charged."""
    with Ledger(f"sqlite:///{tmp_path / 'ledger.db'}") as ledger:
        ledger.reserve(
            "a", "s", None, 1, spec_hash="h" * 64, new_scope_cap=10,
            selection_delta=DELTA * 3 / 4, selection_delta_budget=DELTA,
        )  # fmt: skip
        with pytest.raises(
            LedgerError, match="has 0.00000000025 of its selection δ = 0.000000001 left"
        ):
            ledger.reserve("b", "s", None, 1, spec_hash="h" * 64, selection_delta=DELTA / 2)
        with pytest.raises(LedgerError, match="fixed for life"):
            ledger.reserve(
                "c", "s", None, 1, spec_hash="h" * 64,
                selection_delta=DELTA / 8, selection_delta_budget=DELTA * 2,
            )  # fmt: skip
        assert charged_deltas(ledger) == ["3/4000000000"]
        assert ledger.status("s")[0].spent == 1
        ledger.reserve("d", "s", None, 1, spec_hash="h" * 64, selection_delta=DELTA / 4)
        assert charged_deltas(ledger) == ["3/4000000000", "1/4000000000"]


def test_a_scope_without_a_budget_gets_none_from_a_release_that_does_not_select(
    tmp_path: Path,
) -> None:
    with Ledger(f"sqlite:///{tmp_path / 'ledger.db'}") as ledger:
        ledger.reserve("a", "s", None, 1, spec_hash="h" * 64, new_scope_cap=10)
        assert ledger.selection_delta("s") is None and charged_deltas(ledger) == [None]
        with pytest.raises(LedgerError, match="no δ budget"):
            ledger.reserve("b", "s", None, 1, spec_hash="h" * 64, selection_delta=DELTA)


def test_ledger_status_and_the_planner_read_the_scopes_selection_delta(tmp_path: Path) -> None:
    """`dprelease ledger status` shows the δ kept, spent and left per scope (table and JSON);
    `dprelease plan --ledger` counts what the ledger says is spent (it used to plan as if
    nothing were) and refuses, in one line naming selection_delta, a δ that no longer fits."""
    import json

    import yaml
    from helpers import invoke_cli, one_line_error, words
    from test_selection_release import visits

    visits().to_csv(tmp_path / "visits.csv", index=False)
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump({"release": spec()}))
    ledger = ["--ledger", str(tmp_path / "ledger.sqlite")]
    plan = ["plan", "--spec", str(tmp_path / "spec.yaml"), "--epsilon", "1", *ledger]
    release = ["release", "--spec", str(tmp_path / "spec.yaml"), "--epsilon", "1", *ledger]
    release += ["--data", str(tmp_path / "visits.csv"), "--cap", "2", "--selection-delta", "1e-9"]
    first = invoke_cli(*release, "--out", str(tmp_path / "one"))
    assert first.exit_code == 0, first.output

    status = invoke_cli("ledger", "status", *ledger)
    assert status.exit_code == 0, status.output
    assert "key selection δ budget 0.000000001: spent 0.0000000005, left 0.0000000005" in words(
        status.output
    )
    (scope,) = json.loads(invoke_cli("ledger", "status", *ledger, "--json").output)
    assert scope["selection_delta_exact"] == "1/1000000000"
    assert scope["selection_delta_spent_exact"] == scope["selection_delta_left_exact"]
    assert scope["selection_delta_spent_exact"] == "1/2000000000"

    planned = json.loads(invoke_cli(*plan, "--json").output)
    (report,) = planned["selections"]
    assert report["delta_spent_before"] == pytest.approx(5e-10)
    assert report["delta_left"] == 0  # this release's 5e-10 takes what stays
    said = words(invoke_cli(*plan).output)
    assert "selection δ of the scope: 5e-10 spent before, 5e-10 by this release, 0 left" in said

    second = invoke_cli(*release, "--out", str(tmp_path / "two"), "--force-new")
    assert second.exit_code == 0, second.output
    one_line_error(invoke_cli(*plan), "selection_delta", "spend a smaller δ per release")
