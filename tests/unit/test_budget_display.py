"""The budget as people see it: the report's sentences and tables (the CLI's and the Dagster
budget asset's), and the figures, at the cap in force."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from helpers import ROOT
from matplotlib.figure import Figure

from dprelease.budget import (
    BudgetChoice,
    PrivacyConfig,
    adversary_table,
    budget_summary,
    cap_from_profile,
    choose_budget,
    epsilon_figure,
    group_privacy_table,
    load_privacy_config,
    profile_figure,
)

PIPELINE_PRIVACY = ROOT / "pipelines" / "privacy.yaml"
PAPER_PROFILE = {"kind": "piecewise_linear", "points": [[0, 10], [1, 2], [10, 5]]}
ADVERSARIES = [
    {"name": "prevalence", "q": 0.5, "q0": 0.00125},
    {"name": "naive", "q": 0.5, "q0": 0.5},
]


def hospital() -> BudgetChoice:
    """The demo's visits scope: ε_min = ½ ln 3000 ≈ 4.003, rounded down to 4."""
    return choose_budget(load_privacy_config(PIPELINE_PRIVACY, "hospital_patients"))


def legend_texts(figure: Figure) -> list[str]:
    return [text.get_text() for axes in figure.axes for text in axes.get_legend().get_texts()]


@pytest.mark.parametrize("neighbours", ["add_remove", "substitute"])
def test_table_headers_read_well_in_markdown_and_a_terminal(neighbours: str) -> None:
    """No TeX: Markdown shows e^{2ε} with its braces."""
    config = {"profile": PAPER_PROFILE, "adversaries": ADVERSARIES, "neighbours": neighbours}
    choice = choose_budget(PrivacyConfig.from_mapping(config))
    headers = adversary_table(choice)[0] + group_privacy_table(choice)[0]
    assert not [h for h in headers if set(h) & set("{}^\\$")]
    factor = "exp(2ε)" if neighbours == "add_remove" else "exp(ε)"
    group = "exp(2kε)" if neighbours == "add_remove" else "exp(kε)"
    assert adversary_table(choice)[0][-1] == f"max posterior odds ratio at ε ({factor}·P10)"
    assert group_privacy_table(choice)[0] == ["group size k", "kε", f"odds factor ({group})"]


@pytest.mark.parametrize("draw", [profile_figure, epsilon_figure])
@pytest.mark.parametrize("measure", ["pure", "zcdp"])
def test_the_legend_sits_beside_the_plot_not_over_its_curves(draw: object, measure: str) -> None:
    assert callable(draw)
    choice = hospital() if measure == "pure" else zcdp()
    figure = draw(choice.at_cap(Fraction(3, 2) if measure == "pure" else Fraction(1, 1000)))
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()  # type: ignore[attr-defined]
    for axes in figure.axes:
        legend = axes.get_legend().get_window_extent(renderer)
        plot = axes.get_window_extent(renderer)
        assert not legend.overlaps(plot), (legend, plot)
        assert legend.x0 >= plot.x1 and figure.bbox.contains(legend.x1 - 1, legend.y0 + 1)


def test_the_report_and_plot_show_the_cap_in_force_beside_the_profile() -> None:
    """After `dprelease ledger set-cap hospital_patients 1.5`: the headline, the tables and the
    ε plot are at 1.5, with the profile's ε = 4 beside it."""
    choice = hospital()
    lowered = choice.at_cap(Fraction(3, 2))
    assert budget_summary(lowered)[0] == (
        "Cap in force: ε = 1.5, the ledger's, at which the tables are; the profile allows "
        "ε = 4 (ε_min = 4.0032, rounded down to a multiple of 0.05); neighbours: add/remove "
        "(unbounded DP)."
    )
    single = group_privacy_table(lowered)[1][0]
    assert single == ["1", "1.5", f"{math.exp(3):.4g}"]  # exp(2 · 1.5)
    naive = next(row for row in adversary_table(lowered)[1] if row[0] == "naive")
    assert naive[-1] == f"{math.exp(3):.4g}"  # P10 = 1
    legend = legend_texts(epsilon_figure(lowered))
    assert "cap in force: ε = 1.5 (the ledger's)" in legend
    assert "profile's ε = 4 (rounded down to a multiple of 0.05)" in legend
    assert lowered.to_json_dict()["cap_in_force"] == 1.5
    # the cap the profile allows is no news: the report reads as the profile's
    as_allowed = choice.at_cap(cap_from_profile(choice))
    assert budget_summary(as_allowed) == budget_summary(choice)
    assert not [t for t in legend_texts(epsilon_figure(as_allowed)) if "cap in force" in t]
    assert group_privacy_table(as_allowed) == group_privacy_table(choice)


DELTA = 1e-9


def zcdp(neighbours: str = "add_remove", **extra: object) -> BudgetChoice:
    """The paper's profile under ρ-zCDP: ρ_max from ε_min = ½ ln 2, rounded down to 0.0014."""
    config = {"profile": PAPER_PROFILE, "adversaries": ADVERSARIES, "measure": "zcdp"}
    return choose_budget(
        PrivacyConfig.from_mapping(
            {**config, "delta": DELTA, "neighbours": neighbours, "rounding": 0.0001, **extra}
        )
    )


def rho_max_of(epsilon_min: float, group: int) -> float:
    """Issue 20's closed form: the ρ with group²ρ + 2·group·√(ρL) = group·ε_min, L = ln(1/δ)."""
    tail = math.log(1 / DELTA)
    return ((math.sqrt(tail + group * epsilon_min) - math.sqrt(tail)) / group) ** 2


def test_zcdp_shows_rho_max_beside_epsilon_min_and_the_odds_statement_in_words() -> None:
    choice = zcdp()
    rho_max = rho_max_of(0.5 * math.log(2), 2)
    assert choice.zcdp is not None and choice.zcdp.rho_max == pytest.approx(rho_max, rel=1e-12)
    headline, statement, reached = budget_summary(choice)
    assert headline == (
        f"ρ = 0.0014 (ρ_max = {rho_max:.4g}, rounded down to a multiple of 0.0001) under "
        "ρ-zCDP with δ = 1e-09, beside ε_min = 0.3466; neighbours: add/remove (unbounded DP)."
    )
    assert statement == (
        "With probability at least 1 − δ over the release, an adversary's posterior odds ratio "
        "is at most exp(4ρ + 4√(ρ·ln(1/δ))) times its prior odds ratio P10; ρ_max is the "
        "largest ρ that keeps this within B(P10) at every P10: where B is lowest, 4ρ_max + "
        "4√(ρ_max·ln(1/δ)) = ln B = 2ε_min."
    )
    assert (
        reached
        == "ε_min, and with it ρ_max, is reached at P10 = 1, where the profile tolerates B = 2."
    )
    substitute = budget_summary(zcdp("substitute"))[1]
    assert "at most exp(ρ + 2√(ρ·ln(1/δ))) times" in substitute and "= ln B = ε_min." in substitute


def test_zcdp_tables_say_their_odds_factors_hold_with_probability_one_minus_delta() -> None:
    choice = zcdp()
    tail = math.log(1 / DELTA)
    factor = math.exp(4 * 0.0014 + 4 * math.sqrt(0.0014 * tail))  # at the ρ used
    header, rows = adversary_table(choice)
    assert header[-2:] == ["ρ_P10", "max posterior odds ratio at ρ, with probability ≥ 1 − δ"]
    naive = next(row for row in rows if row[0] == "naive")  # P10 = 1, B = 2: ρ_P10 = ρ_max
    assert naive[-2:] == [f"{rho_max_of(0.5 * math.log(2), 2):.4g}", f"{factor:.4g}"]
    header, rows = group_privacy_table(choice)
    assert header == ["group size k", "k²ρ", "odds factor, with probability ≥ 1 − δ"]
    assert rows[0] == ["1", "0.0014", f"{factor:.4g}"] and rows[1][1] == "0.0056"  # 2²ρ


def test_the_zcdp_figure_has_the_rho_each_p10_allows_on_its_own_panel() -> None:
    figure = epsilon_figure(zcdp())
    epsilon_axes, rho_axes = figure.axes
    rho_max = rho_max_of(0.5 * math.log(2), 2)
    curve = rho_axes.get_lines()[0]
    assert curve.get_label() == "ρ_P10 of B(P10)"
    assert min(curve.get_ydata()) == pytest.approx(rho_max, rel=1e-9)  # reached at P10 = 1
    assert [t.get_text() for t in rho_axes.get_legend().get_texts()] == [
        "ρ_P10 of B(P10)",
        f"ρ_max = {rho_max:.4g}",
        "profile's ρ = 0.0014 (rounded down to a multiple of 0.0001)",
    ]
    assert "δ = 1e-09" in rho_axes.get_title() and "probability ≥ 1 − δ" in rho_axes.get_title()
    assert [t.get_text() for t in epsilon_axes.get_legend().get_texts()] == [
        "ε_P10 of B(P10)",
        "ε_min = 0.3466",  # ε itself is not rounded under zCDP: ρ is
    ]


def test_a_zcdp_cap_in_force_is_a_rho() -> None:
    lowered = zcdp().at_cap(Fraction(1, 1000))
    assert budget_summary(lowered)[0].startswith(
        "Cap in force: ρ = 0.001, the ledger's, at which the tables are; the profile allows "
        "ρ = 0.0014 ("
    )
    assert group_privacy_table(lowered)[1][0][:2] == ["1", "0.001"]
    legend = legend_texts(epsilon_figure(lowered))
    assert "cap in force: ρ = 0.001 (the ledger's)" in legend
    assert not [text for text in legend if text.startswith("cap in force: ε")]
