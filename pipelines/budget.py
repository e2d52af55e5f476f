"""The `privacy_budget` asset: per budget scope, what its profile allows, what the ledger's cap is,
what it has spent, and what is waiting (releases recorded but not published, reservations open).

It follows the releases (`FOLLOWS_RELEASES`, evaluated by the sensor in `pipelines.automation`),
so the budget a UI shows is the ledger's without anyone materializing it by hand. Its scopes
table has short columns that fit the asset's panel; the words (the cap's note, the waiting
releases, the profile's tables and plots) are in its report.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import dagster as dg

from dprelease.budget import budget_markdown, write_plots
from dprelease.change import ProtectedChange
from dprelease.ledger import Ledger, ScopeStatus
from dprelease.loss import typed_text
from dprelease.spec import ResolvedSpec
from pipelines.ledger_state import OpenReservation, Pending, open_reservations, unpublished
from pipelines.messages import amount, amount_words, loss_words
from pipelines.release_specs import publish_of
from pipelines.resources import LedgerResource, PrivacyPolicy, PublicStore, ScopeProfile

BUDGET_KEY = dg.AssetKey("privacy_budget")

#: The privacy budget follows the releases: materialized once after any release has been (by the
#: UI, a backfill, the schedule, `dg launch` or the publish sensor), when no release and no budget
#: run is in progress, so a backfill's months are followed by one budget run. A refused release
#: spends nothing and materializes nothing, so it asks for nothing.
FOLLOWS_RELEASES = (
    dg.AutomationCondition.any_deps_updated().since_last_handled()
    & ~dg.AutomationCondition.any_deps_in_progress()
    & ~dg.AutomationCondition.in_progress()
).with_label("after releases")

#: The scopes table: five short columns, so it fits the asset page's metadata panel; the
#: profile's ε_min (and ρ_max), the cap's note and what waits are in the report beside it.
SCOPE_COLUMNS = ("scope", "cap", "spent", "remaining", "releases")


def _scopes(book: Ledger) -> dict[str, ScopeStatus]:
    return {status.name: status for status in book.status()}


def approximate_text(value: float) -> str:
    """A number the profile gives through logarithms (ε_min = ½·ln 2): not exact as a double
    either, so shown rounded, and marked so."""
    return f"≈ {value:.4g}"


def privacy_budget_asset(
    releases: list[ResolvedSpec], waves: Mapping[str, list[dg.AssetKey]] | None = None
) -> dg.AssetsDefinition:
    """Per budget scope: the profile's ε and plots, the ledger's cap and spending, the terms the
    scope keeps, and every release recorded but not published or reserved but not stored;
    downstream of every release and every local-DP wave asset (`waves`: scope → wave assets),
    which it follows."""
    waves = waves or {}
    scopes = sorted({publish_of(r).scope for r in releases} | set(waves))

    @dg.asset(
        key=BUDGET_KEY,
        group_name="privacy",
        deps=[dg.AssetKey(r.spec.name) for r in releases]
        + [key for keys in waves.values() for key in keys],
        automation_condition=FOLLOWS_RELEASES,
        kinds={"python"},
        description="Per budget scope: ε_min from its odds risk profile (and ρ_max for a zCDP "
        "scope), with plots; the ledger's cap (never above what the profile allows), spent and "
        "remaining; releases recorded but not yet published, and reservations a run left open.",
    )
    def privacy_budget(
        policy: PrivacyPolicy, ledger: LedgerResource, public: PublicStore
    ) -> dg.MaterializeResult:
        budgets = policy.scope_profiles(list(scopes))
        with ledger.open() as book:
            statuses = _scopes(book)
            pending = unpublished(book, releases, public)
            held = open_reservations(book, [s for s in scopes if s in statuses])
            cap_changes = [e for s in scopes for e in book.history(s) if e.kind == "cap_changed"]
        rows, sections = [], []
        for scope, budget in budgets.items():
            status = statuses.get(scope)  # in the ledger: the report is at its cap in force
            choice = budget.choice if status is None else budget.choice.at_cap(status.cap)
            directory = public.budget_dir(scope)
            plots = write_plots(choice, directory)
            (directory / "budget.json").write_text(
                json.dumps(choice.to_json_dict(), indent=2) + "\n"
            )
            waiting = [p for p in pending if p.scope == scope]
            opened = [r for r in held if r.scope == scope]
            rows.append(_row(scope, budget, status, len(waiting), len(opened)))
            sections.append(
                f"## Scope `{scope}`\n\n{_cap_note(scope, budget, status)}\n\n"
                + _terms_note(status)
                + _waiting_text(waiting, opened, status)
                + budget_markdown(choice, plots)
            )
        history = "".join(
            f"- {e.at:%Y-%m-%d %H:%M} UTC, {e.scope}: {e.detail} ({e.actor})\n" for e in cap_changes
        )
        return dg.MaterializeResult(
            metadata={
                "scopes": dg.MetadataValue.table(
                    records=rows,
                    schema=dg.TableSchema(
                        columns=[dg.TableColumn(c, "string") for c in SCOPE_COLUMNS]
                    ),
                ),
                "unpublished": ", ".join(p.release_id for p in pending) or "none",
                "reserved": dg.MetadataValue.md(  # open reservations: charged, not stored
                    "".join(f"- {_reservation_text(r, statuses[r.scope])}\n" for r in held)
                    or "none"
                ),
                "cap_changes": dg.MetadataValue.md(history or "No cap changes."),
                "report": dg.MetadataValue.md("\n\n".join(sections)),
                "plots": dg.MetadataValue.path(str(public.budget_dir())),
            }
        )

    return privacy_budget


def _row(
    scope: str, budget: ScopeProfile, status: ScopeStatus | None, waiting: int, opened: int
) -> dg.TableRecord:
    """One scope in short cells: the cap in force with its unit (ε, or ρ with its δ; the
    profile's beside it when they differ, `new` before the scope's first release), spent (with
    the ε of (ε, δ)-DP a spent ρ implies) and what remains, in that unit; the releases stored,
    with the reservations open and the releases unpublished when there are any."""
    choice = budget.choice
    unit = choice.measure.symbol
    cap = amount_words(unit, budget.profile_cap if status is None else status.cap)
    if status is None:
        cap += " (new)"
    elif status.cap != budget.profile_cap:
        cap += f" (profile: {amount(budget.profile_cap)})"
    if choice.zcdp is not None:
        cap += f", δ = {choice.zcdp.delta:g}"
    spent = amount(0 if status is None else status.spent)
    if status is not None and (implied := status.epsilon_delta()) is not None:
        spent += f" (ε {approximate_text(implied)})"
    releases = str(0 if status is None else status.releases)
    pending = [f"{n} {what}" for n, what in ((opened, "open"), (waiting, "unpublished")) if n]
    if pending:
        releases += f" ({', '.join(pending)})"
    return dg.TableRecord(
        {
            "scope": scope,
            "cap": cap,
            "spent": spent,
            "remaining": amount(budget.profile_cap if status is None else status.remaining),
            "releases": releases,
        }
    )


def _reservation_text(reservation: OpenReservation, scope: ScopeStatus) -> str:
    run = f"run {reservation.run_id}" if reservation.run_id else "an earlier run"
    return (
        f"{reservation.release_id}: {loss_words(scope, reservation.amount)} reserved "
        f"{reservation.at:%Y-%m-%d %H:%M} UTC by {run} (ledger charge {reservation.charge_id}), "
        "not stored: relaunch it (resumed, not charged again) or `dprelease ledger void "
        f"{reservation.release_id} --reason TEXT`"
    )


def _waiting_text(
    waiting: list[Pending], opened: list[OpenReservation], scope: ScopeStatus | None
) -> str:
    """The scope's releases recorded but not published, and its open reservations."""
    text = ""
    if waiting:
        text += f"Recorded, not yet published: {', '.join(p.release_id for p in waiting)}\n\n"
    if opened and scope is not None:  # (a reservation is in the ledger: so is its scope)
        text += "Reserved, not stored (counted as spent):\n\n" + "".join(
            f"- {_reservation_text(r, scope)}\n" for r in opened
        )
        text += "\n"
    return text


def _terms_note(status: ScopeStatus | None) -> str:
    """What the scope keeps for life (its first charge fixes it), in words; a scope of local-DP
    waves says that who answered is public."""
    if status is None:
        return ""
    kept = [status.composition, f"{status.measure.symbol} ({status.measure.value})"]
    if status.neighbours is ProtectedChange.ANSWER:
        kept.append(
            "local-DP waves: answer neighbours (one answer changes; who answered is public, "
            "so no central release shares this scope)"
        )
    elif status.neighbours is not None:
        kept.append(f"{status.neighbours.value} neighbours")
    if status.privacy_unit is not None:
        kept.append(f"privacy unit {status.privacy_unit}")
    return f"Kept for life: {'; '.join(kept)}.\n\n"


def _cap_note(scope: str, budget: ScopeProfile, status: ScopeStatus | None) -> str:
    """The cap in force and how it relates to the profile, in words."""
    allowed = amount(budget.profile_cap)
    if status is None:
        return f"Not in the ledger yet: its first release creates it with cap {allowed}."
    cap = amount(status.cap)
    if status.cap > budget.profile_cap:
        return (
            f"The ledger's cap {cap} is above what the profile now allows ({allowed}): new "
            f"releases are refused until `dprelease ledger set-cap {scope} "
            f"{typed_text(budget.profile_cap)}`; released periods still re-run from the stored "
            "copy."
        )
    if status.cap < budget.profile_cap:
        return (
            f"Cap {cap} (the profile would allow {allowed}; the ledger's cap stays the limit "
            "until raised with `dprelease ledger set-cap`)."
        )
    return f"Cap {cap}, as the profile allows."
