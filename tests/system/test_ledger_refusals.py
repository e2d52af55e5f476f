"""What the ledger's refusals and outcomes say, in each interface: a budget refused under
sequential or parallel composition (the library states what comes back, the CLI, the Python API
and the pipeline each add what can be done there), and a reservation taken over from another
run, which the ledger cannot know to be dead."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest
from helpers import invoke_cli, release_args, words, write_visits
from typer.testing import Result

import dprelease as dp
from dprelease.errors import BudgetExhausted
from dprelease.ledger import Ledger, ScopeTerms, make_release_id
from dprelease.spec import load_spec

SPEC = """\
release:
  name: visits
  source: visits
  privacy_unit: pid
  max_rows_per_unit: 2
  period: {column: day, composition: COMPOSITION}
  group_by:
    - column: region
      domain: {values: [north, south]}
  statistics:
    - {name: n, kind: count}
"""


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    for composition in ("sequential", "parallel"):
        (tmp_path / f"{composition}.yaml").write_text(SPEC.replace("COMPOSITION", composition))
    write_visits(
        tmp_path,
        ["2024-01-03", "2024-02-09", "2024-03-11"],
        pid=[1, 2, 3],
        region=["north", "south", "south"],
    )
    return tmp_path


def release(ws: Path, period: str, *args: str, composition: str = "sequential") -> Result:
    return invoke_cli("release", *release_args(ws, period, spec=f"{composition}.yaml"), *args)


def refused(
    composition: str = "sequential", spent: Fraction = Fraction(3, 4), period: str | None = None
) -> BudgetExhausted:
    ledger = Ledger("sqlite://")
    terms = ScopeTerms(composition)  # type: ignore[arg-type]
    ledger.ensure_scope("visits", 1, composition)  # type: ignore[arg-type]
    if spent:
        ledger.reserve("first/1", "visits", period, spent, spec_hash="h", terms=terms)
    with pytest.raises(BudgetExhausted) as info:
        ledger.reserve("next/2", "visits", period, 1, spec_hash="h", terms=terms)
    return info.value


# -- the library: what the composition brings back ---------------------------------------------


def test_a_sequential_refusal_says_no_new_period_brings_budget_back() -> None:
    exc = refused()
    assert (exc.scope, exc.spent, exc.cap, exc.requested, exc.remaining) == (
        "visits",
        Fraction(3, 4),
        1,
        1,
        Fraction(1, 4),
    )
    assert (exc.composition, exc.period) == ("sequential", None)
    text = str(exc)
    assert text.startswith(
        "privacy budget exhausted for scope 'visits': spent ε = 0.75 of cap 1, requested 1, "
        "remaining 0.25; nothing was charged."
    )
    assert "what it has spent never comes back, and a new period draws on the same cap" in text
    assert "wait for a new" not in text
    assert text.endswith(
        "To go on, release with epsilon at most 0.25, or raise the scope's cap on purpose "
        "(Ledger.set_cap)."
    )


def test_a_parallel_refusal_says_the_next_period_has_its_own_full_cap() -> None:
    exc = refused("parallel", Fraction(2, 3), period="2024-01")
    assert (exc.composition, exc.period, exc.remaining) == ("parallel", "2024-01", Fraction(1, 3))
    text = str(exc)
    assert "exhausted for scope 'visits', period 2024-01: spent ε = 2/3 ≈ 0.667 of cap 1," in text
    assert "composes periods in parallel: every other period has its own full cap of ε = 1." in text
    assert "release with epsilon at most 1/3," in text  # exact: 0.333333 would be refused too


def test_with_nothing_left_the_only_action_is_a_higher_cap() -> None:
    exc = refused(spent=Fraction(1))
    assert exc.remaining == 0
    assert str(exc).endswith("To go on, raise the scope's cap on purpose (Ledger.set_cap).")


# -- each interface adds its own action ---------------------------------------------------------


def test_the_cli_offers_a_smaller_epsilon_or_set_cap(ws: Path) -> None:
    assert release(ws, "2024-01", "--epsilon", "2/3", "--cap", "1").exit_code == 0
    result = release(ws, "2024-02", "--epsilon", "1/2")
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    text = words(result.stderr)
    assert "remaining 1/3 ≈ 0.333; nothing was charged" in text
    assert "a new period draws on the same cap" in text
    assert text.endswith(
        "To go on, release with --epsilon 1/3 or less, or raise the scope's cap on purpose: "
        "`dprelease ledger set-cap visits CAP --reason TEXT`."
    )
    assert release(ws, "2024-02", "--epsilon", "1/3").exit_code == 0  # as offered: it fits
    exhausted = words(release(ws, "2024-03", "--epsilon", "0.1").stderr)
    assert "--epsilon" not in exhausted and exhausted.endswith(
        "To go on, raise the scope's cap on purpose: "
        "`dprelease ledger set-cap visits CAP --reason TEXT`."
    )


def test_the_cli_on_a_parallel_scope_points_at_other_periods(ws: Path) -> None:
    args = ("--epsilon", "1", "--cap", "1")
    assert release(ws, "2024-01", *args, composition="parallel").exit_code == 0
    text = words(release(ws, "2024-01", *args, "--force-new", composition="parallel").stderr)
    assert "for scope 'visits', period 2024-01" in text
    assert "every other period has its own full cap of ε = 1" in text
    assert release(ws, "2024-02", *args, composition="parallel").exit_code == 0


def test_the_api_offers_a_smaller_epsilon(ws: Path) -> None:
    ledger = Ledger(str(ws / "ledger.sqlite"))
    ledger.ensure_scope("visits", Fraction(1, 2))
    spec = dp.ReleaseSpec.from_yaml(ws / "sequential.yaml")
    dp.release(ws / "visits.parquet", spec, epsilon="3/8", ledger=ledger, period="2024-01")
    with pytest.raises(BudgetExhausted) as info:
        dp.release(ws / "visits.parquet", spec, epsilon="1/4", ledger=ledger, period="2024-02")
    assert str(info.value).endswith(
        "To go on, release with epsilon at most 0.125, or raise the scope's cap on purpose "
        "(Ledger.set_cap)."
    )


def test_the_pipeline_offers_a_smaller_publish_share_or_set_cap() -> None:
    from pipelines.messages import refusal

    exc = BudgetExhausted("hospital_patients", Fraction(11, 3), Fraction(4), Fraction(1, 3))
    text = refusal(exc)
    assert text.startswith(
        "privacy budget exhausted for scope 'hospital_patients': spent ε = 11/3 ≈ 3.67 of cap 4"
    )
    assert "a new period draws on the same cap" in text
    assert text.endswith(
        "To go on, lower the spec's publish.share to at most 1/12, or raise the scope's cap on "
        "purpose: `dprelease ledger set-cap hospital_patients CAP --reason TEXT`."
    )
    assert "epsilon" not in text.lower()  # an operator chooses no ε in the pipeline
    spent = refusal(BudgetExhausted("s", Fraction(4), Fraction(4), Fraction(1, 3)))
    assert "publish.share" not in spent


# -- a reservation taken over -------------------------------------------------------------------


def test_a_run_that_takes_over_an_open_reservation_does_not_claim_the_other_died(
    ws: Path,
) -> None:
    """The other run may be alive (a concurrent run): the ledger only knows it has not
    committed; the words must say so, not "finished an interrupted release"."""
    ledger = Ledger(str(ws / "ledger.sqlite"))
    ledger.ensure_scope("visits", 1)
    spec_hash = load_spec(ws / "sequential.yaml").hash
    release_id = make_release_id("visits", "2024-01")
    ledger.reserve(release_id, "visits", "2024-01", "1/2", spec_hash=spec_hash, run_id="run-a")
    result = release(ws, "2024-01", "--epsilon", "1/2")
    assert result.exit_code == 0, result.output
    text = words(result.stdout)
    assert "interrupted" not in text
    assert (
        f"{release_id}: took over an open reservation of this release made by another run, "
        "which may have died or may still be running (charged once;"
    ) in text
    (event,) = [e for e in ledger.history("visits") if e.kind == "resumed"]
    assert event.detail == (
        "took over the open reservation of run run-a (dead, or still running); not charged again"
    )
    assert ledger.status("visits")[0].spent == Fraction(1, 2)
