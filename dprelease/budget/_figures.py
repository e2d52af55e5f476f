"""Show a budget choice to people: the paper's Figures 1 and 2 as PNGs, and a markdown summary.

The same renderings serve the CLI (`dprelease epsilon --plot`) and Dagster metadata, so a steward
sees one explanation of ε wherever they look. Plots use matplotlib's `Figure` with the Agg
canvas directly: no pyplot global state, no display needed.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from dprelease.budget._choice import BudgetChoice, Zcdp, cap_from_profile
from dprelease.budget._profiles import epsilon_for_bound
from dprelease.budget._zcdp import rho_for_log_bound
from dprelease.files import atomic_path
from dprelease.loss import amount_text

if TYPE_CHECKING:  # matplotlib is imported where a figure is drawn: start-up stays fast
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

PROFILE_PNG = "profile.png"
EPSILON_PNG = "epsilon.png"
_NEIGHBOURS_TEXT = {"add_remove": "add/remove (unbounded DP)", "substitute": "substitute (bounded)"}


def argmin_text(choice: BudgetChoice) -> str:
    """Where ε_min is reached, honestly: a limit P10 → 0 is not a point."""
    if choice.argmin_p10 > 0:
        return f"P10 = {choice.argmin_p10:.4g}"
    if choice.argmin_attained:
        return "every small P10 (from P10 → 0)"
    return "the limit P10 → 0 (approached, not reached)"


def _p10_axis(choice: BudgetChoice) -> NDArray[np.float64]:
    """A log-spaced P10 range covering every breakpoint and adversary, plus the breakpoints."""
    marks = [p for profile in choice.profiles for p in profile.breakpoints() if p > 0]
    marks += [row.p10 for row in choice.adversaries]
    low = min([1e-3, *(m / 10 for m in marks)])
    high = max([1e4, *(m * 10 for m in marks)])
    grid = np.logspace(np.log10(low), np.log10(high), 801)
    return np.unique(np.concatenate([grid, [m for m in marks if low <= m <= high]]))


def _label(choice: BudgetChoice, index: int) -> str:
    return "B(P10)" if len(choice.profiles) == 1 else f"profile {index}"


def _mark_argmin(axes: Axes, choice: BudgetChoice, x_left: float, y: float) -> None:
    x = choice.argmin_p10 if choice.argmin_p10 > 0 else x_left
    axes.plot([x], [y], "o", color="crimson", zorder=3)
    axes.annotate(
        f"min at {argmin_text(choice)}",
        (x, y),
        textcoords="offset points",
        xytext=(-8, 8),
        ha="right",
        color="crimson",
        fontsize=8,
    )


def _new_figure(panels: int = 1) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(10, 4.2 * panels), layout="constrained")
    FigureCanvasAgg(figure)
    figure.subplots(panels, 1, sharex=True, squeeze=False)
    return figure


def _finish(axes: Axes, ylabel: str, title: str, *, xlabel: bool = True) -> None:
    """Log P10 axis, labels, and the legend beside the plot, never over the curves."""
    axes.set_xscale("log")
    if xlabel:  # a panel above another shares its P10 axis
        axes.set_xlabel("adversary's prior odds ratio P10 (log scale)")
    axes.set_ylabel(ylabel)
    axes.set_title(title)
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, fontsize=8)


def _save(figure: Figure, path: Path) -> Path:
    with atomic_path(path) as temporary:  # whole or not at all; never into a device or FIFO
        figure.savefig(temporary, dpi=120, format="png")
    return path


def profile_figure(choice: BudgetChoice) -> Figure:
    """Figure 1: B(P10) on a log P10 axis, each adversary marked and labelled."""
    p10 = _p10_axis(choice)
    figure = _new_figure()
    [axes] = figure.axes
    for index, profile in enumerate(choice.profiles):
        axes.plot(p10, profile.bound(p10), label=_label(choice, index))
    for row in choice.adversaries:
        axes.plot([row.p10], [row.bound], "s", color="black", zorder=3)
        axes.annotate(
            f"{row.name}\nP10={row.p10:.4g}, B={row.bound:.4g}",
            (row.p10, row.bound),
            textcoords="offset points",
            xytext=(6, 6),
            fontsize=8,
        )
    _mark_argmin(axes, choice, float(p10[0]), choice.bound_at_argmin)
    _finish(axes, "tolerated factor B(P10) on the odds ratio", "Odds risk profile")
    return figure


def _budget_lines(
    axes: Axes,
    symbol: str,
    bound: tuple[str, float],
    used: float,
    reason: str,
    cap: Fraction | None,
) -> None:
    """The `bound` the profile sets (ε_min, ρ_max), the amount used when rounding (or the
    companion) lowered it, and the cap in force when it is another, as horizontal lines."""
    name, minimum = bound
    axes.axhline(minimum, color="crimson", linestyle="--", label=f"{name} = {minimum:.4g}")
    if used != minimum:
        label = f"profile's {symbol} = {used:.4g} ({reason})"
        axes.axhline(used, color="grey", linestyle=":", label=label)
    if cap is not None:
        label = f"cap in force: {symbol} = {amount_text(cap)} (the ledger's)"
        axes.axhline(float(cap), color="tab:green", linestyle="-.", label=label)


def epsilon_figure(choice: BudgetChoice) -> Figure:
    """Figure 2: ε_P10 on a log P10 axis with ε_min, the ε used and the cap in force marked;
    under zCDP a second panel with the ρ each P10 allows (`rho_for_log_bound`) and ρ_max."""
    p10 = _p10_axis(choice)
    figure = _new_figure(1 if choice.zcdp is None else 2)
    axes = figure.axes[0]
    for index, profile in enumerate(choice.profiles):
        epsilon = epsilon_for_bound(choice.neighbours, profile.bound(p10))
        axes.plot(p10, epsilon, label=f"ε_P10 of {_label(choice, index)}")
    cap = _cap_differing(choice)
    minimum = ("ε_min", choice.epsilon_min)
    if choice.zcdp is None:
        _budget_lines(axes, "ε", minimum, choice.epsilon, _epsilon_reason(choice), cap)
    else:  # the budget is ρ: its rounding and cap are drawn on the ρ panel
        _budget_lines(axes, "ε", minimum, choice.epsilon_min, "", None)
    _mark_argmin(axes, choice, float(p10[0]), choice.epsilon_min)
    title = f"ε per prior odds ratio, {_NEIGHBOURS_TEXT[choice.neighbours.value]}"
    _finish(axes, "largest ε allowed at P10", title, xlabel=choice.zcdp is None)
    if choice.zcdp is not None:
        _rho_panel(figure.axes[1], choice, choice.zcdp, p10, cap)
    return figure


def _rho_panel(
    axes: Axes, choice: BudgetChoice, zcdp: Zcdp, p10: NDArray[np.float64], cap: Fraction | None
) -> None:
    """ρ_P10: the largest ρ whose odds statement, holding with probability ≥ 1 − δ, stays within
    B(P10) at that P10; ρ_max is its minimum, reached where ε_min is."""
    for index, profile in enumerate(choice.profiles):
        rho = [
            rho_for_log_bound(math.log(bound), zcdp.delta, choice.neighbours)
            for bound in profile.bound(p10)
        ]
        axes.plot(p10, rho, label=f"ρ_P10 of {_label(choice, index)}")
    _budget_lines(axes, "ρ", ("ρ_max", zcdp.rho_max), zcdp.rho, _rho_reason(choice), cap)
    _mark_argmin(axes, choice, float(p10[0]), zcdp.rho_max)
    title = (
        f"ρ per prior odds ratio, ρ-zCDP with δ = {zcdp.delta:g}\n"
        "(each odds bound holds with probability ≥ 1 − δ)"
    )
    _finish(axes, "largest ρ allowed at P10", title)


def write_plots(choice: BudgetChoice, directory: Path) -> tuple[Path, Path]:
    """Both figures into `directory` (created if needed): profile.png, epsilon.png."""
    directory.mkdir(parents=True, exist_ok=True)
    return (
        _save(profile_figure(choice), directory / PROFILE_PNG),
        _save(epsilon_figure(choice), directory / EPSILON_PNG),
    )


Table = tuple[list[str], list[list[str]]]


def _odds_factor_text(choice: BudgetChoice, multiple: str = "") -> str:
    """exp(2ε) (add/remove) or exp(ε) (substitute): plain text, which reads the same in a
    terminal and in Markdown (where e^{2ε} shows its braces)."""
    group = choice.neighbours.value_change_group
    return f"exp({group if group > 1 else ''}{multiple}ε)"


def _zcdp_exponent(choice: BudgetChoice, rho: str = "ρ") -> str:
    """4ρ + 4√(ρ·ln(1/δ)) (add/remove) or ρ + 2√(ρ·ln(1/δ)) (substitute): the log of the odds
    factor that ρ keeps with probability ≥ 1 − δ (`budget._zcdp.log_odds_bound`)."""
    group = choice.neighbours.value_change_group
    return f"{group * group if group > 1 else ''}{rho} + {2 * group}√({rho}·ln(1/δ))"


#: Under zCDP an odds factor is a tail bound: it fails with probability at most δ.
_WITH_PROBABILITY = "with probability ≥ 1 − δ"


def adversary_table(choice: BudgetChoice) -> Table:
    """Header and formatted rows of the adversary table (shared by the CLI and markdown); under
    zCDP with each adversary's ρ_P10, and the odds ratio ρ allows with probability ≥ 1 − δ."""
    header = ["adversary", "q", "q0", "P10", "B(P10)", "ε_P10"]
    if choice.zcdp is None:
        header.append(f"max posterior odds ratio at ε ({_odds_factor_text(choice)}·P10)")
    else:
        header += ["ρ_P10", f"max posterior odds ratio at ρ, {_WITH_PROBABILITY}"]
    rows = []
    for row in choice.adversaries:
        cells = [row.name, f"{row.q:.4g}", f"{row.q0:.4g}", f"{row.p10:.4g}", f"{row.bound:.4g}"]
        cells.append(f"{row.epsilon:.4f}")
        if row.rho is not None:
            cells.append(f"{row.rho:.4g}")
        rows.append([*cells, f"{row.max_posterior_odds_ratio:.4g}"])
    return header, rows


def group_privacy_table(choice: BudgetChoice) -> Table:
    """Header and formatted rows of the household (group privacy) table: kε, or under zCDP k²ρ
    with the odds factor it keeps with probability ≥ 1 − δ."""
    if choice.zcdp is None:
        header = ["group size k", "kε", f"odds factor ({_odds_factor_text(choice, 'k')})"]
        amounts = [r.epsilon for r in choice.group_privacy]
    else:
        header = ["group size k", "k²ρ", f"odds factor, {_WITH_PROBABILITY}"]
        amounts = [r.rho or 0.0 for r in choice.group_privacy]
    rows = [
        [str(r.k), f"{amount:.4g}", f"{r.odds_factor:.4g}"]
        for r, amount in zip(choice.group_privacy, amounts, strict=True)
    ]
    return header, rows


def markdown_table(table: Table) -> str:
    """A header and rows of text as a Markdown table (the budget report, Dagster previews)."""
    header, rows = table
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _prior_risk_binds(choice: BudgetChoice) -> bool:
    return choice.prior_risk_epsilon is not None and choice.prior_risk_epsilon < choice.epsilon_min


def _epsilon_reason(choice: BudgetChoice) -> str:
    """Why the ε used differs from the odds profile's ε_min (empty when it does not)."""
    reasons = []
    if _prior_risk_binds(choice):
        reasons.append(
            f"bounded by the posterior-to-prior profile's {choice.prior_risk_epsilon:.4f}"
        )
    if choice.rounding and choice.zcdp is None:  # under zCDP the rounding is ρ's
        reasons.append(f"rounded down to a multiple of {choice.rounding}")
    return ", ".join(reasons)


def _rho_reason(choice: BudgetChoice) -> str:
    """Why the ρ used differs from ρ_max (empty when it does not)."""
    return f"rounded down to a multiple of {choice.rounding}" if choice.rounding else ""


def _cap_differing(choice: BudgetChoice) -> Fraction | None:
    """The cap in force (`BudgetChoice.at_cap`) when it is not the cap the profile allows."""
    cap = choice.cap_in_force
    return None if cap is None or cap == cap_from_profile(choice) else cap


def budget_summary(choice: BudgetChoice) -> list[str]:
    """Plain sentences: the ε used, or under zCDP the ρ used with ρ_max beside ε_min and the odds
    statement's probability in words; the cap in force where it is another; where ε_min binds."""
    if choice.zcdp is None:
        symbol, reason = "ε", _epsilon_reason(choice)
        allowed = f"ε = {choice.epsilon:.4g} (ε_min = {choice.epsilon_min:.4f}"
    else:
        symbol, reason = "ρ", _rho_reason(choice)
        allowed = f"ρ = {choice.zcdp.rho:.4g} (ρ_max = {choice.zcdp.rho_max:.4g}"
    allowed += f", {reason})" if reason else ")"
    if choice.zcdp is not None:
        allowed += (
            f" under ρ-zCDP with δ = {choice.zcdp.delta:g}, beside ε_min = {choice.epsilon_min:.4f}"
        )
    if (cap := _cap_differing(choice)) is not None:
        allowed = (
            f"Cap in force: {symbol} = {amount_text(cap)}, the ledger's, at which the tables "
            f"are; the profile allows {allowed}"
        )
    sentences = [f"{allowed}; neighbours: {_NEIGHBOURS_TEXT[choice.neighbours.value]}."]
    reached = "ε_min is reached"
    if choice.zcdp is not None:
        group = choice.neighbours.value_change_group
        sentences.append(
            f"With probability at least 1 − δ over the release, an adversary's posterior odds "
            f"ratio is at most exp({_zcdp_exponent(choice)}) times its prior odds ratio P10; "
            "ρ_max is the largest ρ that keeps this within B(P10) at every P10: where B is "
            f"lowest, {_zcdp_exponent(choice, 'ρ_max')} = ln B = "
            f"{group if group > 1 else ''}ε_min."
        )
        reached = "ε_min, and with it ρ_max, is reached"
    sentences.append(
        f"{reached} at {argmin_text(choice)}, where the profile tolerates "
        f"B = {choice.bound_at_argmin:.4g}."
    )
    return sentences


def companion_text(choice: BudgetChoice) -> str | None:
    """The posterior-to-prior selector's ε, if configured; the smaller of the two ε is used."""
    if choice.prior_risk_epsilon is None:
        return None
    effect = "binds: it is below ε_min" if _prior_risk_binds(choice) else "holds at ε_min too"
    return (
        "Companion posterior-to-prior selector (Kazan & Reiter 2024): "
        f"ε = {choice.prior_risk_epsilon:.4f} ({effect})."
    )


def budget_markdown(choice: BudgetChoice, images: Sequence[Path] = ()) -> str:
    """ε_min, where it binds, the adversary and group-privacy tables as markdown; PNG `images`
    are embedded as data URIs so the markdown shows them wherever it is rendered (Dagster UI)."""
    parts = budget_summary(choice)
    if choice.adversaries:
        parts.append(markdown_table(adversary_table(choice)))
    parts.append(markdown_table(group_privacy_table(choice)))
    if companion := companion_text(choice):
        parts.append(companion)
    parts += [
        f"![{image.stem}](data:image/png;base64,{base64.b64encode(image.read_bytes()).decode()})"
        for image in images
    ]
    return "\n\n".join(parts) + "\n"
