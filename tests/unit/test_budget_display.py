"""The budget as people see it: the report's sentences and tables (the CLI's and the Dagster
budget asset's), and the figures, at the cap in force."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from conftest import ROOT
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
def test_the_legend_sits_beside_the_plot_not_over_its_curves(draw: object) -> None:
    assert callable(draw)
    figure = draw(hospital().at_cap(Fraction(3, 2)))
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
