"""`rule:` on a selected domain: a spec may name the selection's rule (optimal, gaussian_threshold,
laplace_threshold) or leave it to the plan (auto). Unset, the spec reads, hashes and releases as
before the field existed; set, it is part of the spec's identity. A rule the scope's measure or
the domain's policy cannot use is refused in one line at its YAML path before anything is read
or charged. The manifest and the planner say which rule was used and why. The keep
probabilities of each rule at G = 5 are the ones the README and docs/selection.md state
(numbers copied from `bench/bench_selection.py curves`, not recomputed by the code under test)."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from helpers import invoke_cli, one_line_error, words
from test_selection_release import COMMON, spec, visits

import dprelease as dp
from dprelease.change import ProtectedChange
from dprelease.errors import SpecError
from dprelease.loss import PrivacyLoss
from dprelease.mechanism.selection import Policy, Rule, plan_for_domain, plan_selection
from dprelease.spec import SelectDomain, load_spec, parse_spec

#: The hashes main (a0b6303, before `rule:` existed) gave these selecting specs: a slot released
#: then must re-run without SpecChanged.
HASH_BEFORE = {
    "plain": "b5d3b1fc10dac4d7c82c6ec3e43eaa6a83054ec2c3de888dd26c1fb167cfc116",
    "options": "7ffb8625971e42e64d116b5a18bfe39919ff006e1f73bc09a643fed412322029",
}
OPTIONS = {"max_keys_per_unit": 5, "policy": "per_key", "always": ["A00"]}


def test_unset_or_auto_keeps_the_hash_a_spec_had_before_the_field() -> None:
    assert parse_spec(spec()).hash == HASH_BEFORE["plain"]
    assert parse_spec(spec(rule="auto")).hash == HASH_BEFORE["plain"]
    assert parse_spec(spec(**OPTIONS)).hash == HASH_BEFORE["options"]
    assert parse_spec(spec(rule="auto", **OPTIONS)).hash == HASH_BEFORE["options"]
    assert "rule" not in parse_spec(spec()).spec.canonical_json()


def test_a_named_rule_is_part_of_the_spec_identity() -> None:
    hashes = {rule: parse_spec(spec(rule=rule)).hash for rule in Rule}
    assert len(set(hashes.values()) | {HASH_BEFORE["plain"]}) == len(Rule) + 1
    domain = parse_spec(spec(rule="gaussian_threshold")).spec.group_by[1].domain
    assert isinstance(domain, SelectDomain) and domain.rule == "gaussian_threshold"
    assert SelectDomain(select=True, rule="auto").rule is None  # one spelling: auto is unset


def _refusal(tmp_path: Path, **domain: Any) -> str:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({"release": spec(**domain)}))
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    assert "\n" not in str(caught.value)
    return str(caught.value)


@pytest.mark.parametrize(
    ("rule", "words"),
    [
        ("greedy", "write auto, optimal, gaussian_threshold, laplace_threshold"),
        ("truncated_geometric", "PipelineDP's truncated_geometric is the optimal rule here"),
        ("Optimal", "unknown rule 'Optimal'"),
    ],
)
def test_an_unknown_rule_is_refused_at_its_yaml_path(tmp_path: Path, rule: str, words: str) -> None:
    message = _refusal(tmp_path, rule=rule)
    assert message.startswith("release.group_by[1].domain.rule: ") and words in message


@pytest.mark.parametrize(
    ("loss", "domain", "words"),
    [
        (PrivacyLoss.zcdp(Fraction(1, 2)), {"rule": "optimal"}, "write rule: gaussian_threshold"),
        (PrivacyLoss.zcdp(Fraction(1, 2)), {"rule": "laplace_threshold"}, "pure-ε rule"),
        (
            PrivacyLoss.pure(Fraction(1)),
            {"rule": "optimal", "policy": "weighted", "max_keys_per_unit": 3},
            "write rule: laplace_threshold or policy: per_key",
        ),
        (
            PrivacyLoss.pure(Fraction(1)),
            {"rule": "gaussian_threshold", "policy": "weighted", "max_keys_per_unit": 3},
            "write policy: per_key",
        ),
        (  # ε = 0.01, δ = 1e-12, G = 20 under substitution: no Gaussian threshold is proved
            PrivacyLoss.pure(Fraction(1, 100)),
            {"rule": "gaussian_threshold", "max_keys_per_unit": 20},
            "leave the rule to the plan",
        ),
    ],
)
def test_a_rule_the_scope_cannot_use_is_refused_at_its_yaml_path(
    loss: PrivacyLoss, domain: dict[str, Any], words: str
) -> None:
    change = ProtectedChange.SUBSTITUTE if "max_keys_per_unit" in domain else None
    with pytest.raises(SpecError) as caught:
        plan_for_domain(
            SelectDomain(select=True, **domain),
            loss,
            Fraction(1, 10**12),
            change or ProtectedChange.ADD_REMOVE,
            "release.group_by[1].domain",
        )
    message = str(caught.value)
    assert message.startswith("release.group_by[1].domain.rule: ") and words in message
    assert "\n" not in message


def test_a_pure_rule_in_a_zcdp_scope_is_refused_by_the_planner_and_the_release(
    tmp_path: Path,
) -> None:
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump({"release": spec(rule="optimal")}))
    refused = invoke_cli(
        "plan", "--spec", str(tmp_path / "spec.yaml"), "--rho", "1/2", "--selection-delta",
        "1e-9",
    )  # fmt: skip
    said = "a zCDP scope selects keys by gaussian_threshold (optimal is a pure-ε rule)"
    one_line_error(
        refused, "release.group_by[1].domain.rule:", said,
        "write rule: gaussian_threshold, or leave rule out",
    )  # fmt: skip
    with pytest.raises(SpecError, match=r"^release\.group_by\[1\]\.domain\.rule: a zCDP"):
        dp.release(visits(), spec(rule="laplace_threshold"), rho="1/2", selection_delta=1e-9)


@pytest.mark.parametrize("rule", [rule.value for rule in Rule])
def test_dp_release_on_pandas_with_each_rule(rule: str) -> None:
    result = dp.release(visits(), spec(rule=rule), epsilon=1, selection_delta=1e-9)
    assert sorted(set(result.table["dx"].to_list())) == sorted(COMMON)  # every common key
    (entry,) = result.manifest.selections or []
    assert (entry.mechanism, entry.rule_chosen_by) == (rule, "spec")
    assert entry.rule_reason == f"named in the spec (rule: {rule})"
    assert entry.tau == {"optimal": 40, "gaussian_threshold": 66, "laplace_threshold": 42}[rule]


def test_a_zcdp_release_with_its_rule_named_and_with_auto() -> None:
    named = dp.release(visits(), spec(rule="gaussian_threshold"), rho="1/2", selection_delta=1e-9)
    auto = dp.release(visits(), spec(), rho="1/2", selection_delta=1e-9)
    assert sorted(set(named.table["dx"].to_list())) == sorted(COMMON)
    first, second = (named.manifest.selections or [])[0], (auto.manifest.selections or [])[0]
    assert (first.mechanism, first.rule_chosen_by) == ("gaussian_threshold", "spec")
    assert (second.mechanism, second.rule_chosen_by) == ("gaussian_threshold", "auto")
    assert second.rule_reason == "a zCDP scope selects keys by gaussian_threshold"
    assert first.tau == second.tau


def test_the_manifest_and_the_planner_say_why_auto_chose_its_rule(tmp_path: Path) -> None:
    five = spec(max_keys_per_unit=5)
    planned = dp.plan(five, epsilon="0.694", selection_delta=1e-6)  # the selection's: 0.347
    entry = (planned.selections or [])[0].entry
    assert (entry.mechanism, entry.rule_chosen_by) == ("gaussian_threshold", "auto")
    assert entry.rule_reason == (
        "the smaller τ, the count of units from which a key is kept with probability ≥ 1/2: "
        "131 units, against 175 for optimal"
    )
    two = dp.plan(spec(max_keys_per_unit=2), epsilon="0.694", selection_delta=1e-6)
    assert (two.selections or [])[0].entry.rule_reason.endswith(  # type: ignore[union-attr]
        "71 units, against 81 for gaussian_threshold"
    )
    one = dp.release(visits(), spec(), epsilon=1, selection_delta=1e-9).manifest
    assert (one.selections or [])[0].rule_reason.startswith("one change moves one key's count")
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump({"release": five}))
    printed = invoke_cli(
        "plan", "--spec", str(tmp_path / "spec.yaml"), "--epsilon", "0.694",
        "--selection-delta", "1e-6", columns=200,
    )  # fmt: skip
    assert printed.exit_code == 0, printed.output
    assert "rule gaussian_threshold (auto): the smaller τ" in words(printed.output)
    (tmp_path / "named.yaml").write_text(
        yaml.safe_dump({"release": spec(max_keys_per_unit=5, rule="optimal")})
    )
    named = invoke_cli(
        "plan", "--spec", str(tmp_path / "named.yaml"), "--epsilon", "0.694",
        "--selection-delta", "1e-6", "--json", columns=200,
    )  # fmt: skip
    assert named.exit_code == 0, named.output
    said = json.loads(named.output)["selections"][0]["entry"]
    assert (said["mechanism"], said["rule_chosen_by"]) == ("optimal", "spec")
    assert said["rule_reason"] == "named in the spec (rule: optimal)"


# --------------------------------------------------------------------------- the bench's table

#: ε = 0.347, δ = 1e-6, G = 5, units holding five keys: `bench/bench_selection.py curves`'s
#: numbers (3 significant digits), the table in README.md and docs/selection.md.
COUNTS = (1, 2, 5, 10, 20, 30, 50, 100, 150, 200, 500, 1000)
TABLE_G5 = {
    "gaussian_threshold": (
        1.75e-07, 2.15e-07, 3.98e-07, 1.07e-06, 6.96e-06, 3.89e-05, 0.000782, 0.117, 0.782,
        0.997, 1, 1,
    ),
    "optimal": (
        2e-07, 4.14e-07, 1.15e-06, 2.79e-06, 8.37e-06, 1.95e-05, 8.67e-05, 0.00287, 0.0924,
        0.916, 1, 1,
    ),
    "laplace_threshold": (
        1.97e-07, 2.11e-07, 2.6e-07, 3.67e-07, 7.36e-07, 1.47e-06, 5.9e-06, 0.00019, 0.00609,
        0.196, 1, 1,
    ),
}  # fmt: skip
#: PyDP 1.1.5's `probability_of_keep` for PipelineDP's truncated geometric at G = 5 (its own
#: floating-point code): the optimal rule with Δ-scaling is the same rule, drawn exactly here.
PIPELINEDP_TRUNCATED_GEOMETRIC_G5 = (
    2.0000008000004803e-07, 4.143731396209555e-07, 1.1544358043117329e-06,
    2.787750888618436e-06, 8.368009590269492e-06, 1.9538048959455906e-05,
    8.665361859688004e-05, 0.002871418641350684, 0.0923646949467468, 0.9158255421151185, 1.0,
    1.0,
)  # fmt: skip


#: PyDP 1.1.5's `probability_of_keep` for PipelineDP's Gaussian thresholding at G = 5 (its
#: analytic Gaussian in floating point, half of δ to the noise and half to the threshold).
PIPELINEDP_GAUSSIAN_G5 = (
    1.0000002004240116e-07, 1.2260247972406546e-07, 2.240524744623329e-07,
    5.951487810351708e-07, 3.782411158059773e-06, 2.0923136629602546e-05,
    0.0004236859683467431, 0.07545435526654165, 0.6787406698300082, 0.9909774031524504, 1.0,
    1.0,
)  # fmt: skip


def _three_digits(value: float) -> float:
    return float(f"{value:.3g}")


def test_at_five_keys_per_unit_each_rule_keeps_what_the_table_states() -> None:
    loss, delta = PrivacyLoss.pure(Fraction("0.347")), Fraction(1, 10**6)
    auto = plan_selection(loss, delta, 5)
    assert auto.rule is Rule.GAUSSIAN and auto.auto_reason is not None
    for rule, stated in TABLE_G5.items():
        plan = plan_selection(loss, delta, 5, rule=Rule(rule), policy=Policy.PER_KEY)
        kept = plan.keep_probability(np.array(COUNTS), keys_per_unit=5)
        assert [_three_digits(p) for p in kept] == list(stated), rule
    kept = auto.keep_probability(np.array(COUNTS), keys_per_unit=5)
    assert [_three_digits(p) for p in kept] == list(TABLE_G5["gaussian_threshold"])


def test_the_optimal_rule_is_pipelinedps_truncated_geometric_at_every_n() -> None:
    """Equal within PyDP's floating-point rounding (relative 1e-12) at every n of the grid, and
    equal to the recurrence of Desfontaines et al. (Theorem 1) run independently in floats at
    ε/5 and δ_k = 1 − (1 − δ)^(1/5)."""
    loss, delta = PrivacyLoss.pure(Fraction("0.347")), Fraction(1, 10**6)
    plan = plan_selection(loss, delta, 5, rule=Rule.OPTIMAL)
    ours = plan.keep_probability(np.array(COUNTS))
    np.testing.assert_allclose(ours, PIPELINEDP_TRUNCATED_GEOMETRIC_G5, rtol=1e-12, atol=0)
    epsilon, delta_k = 0.347 / 5, -math.expm1(math.log1p(-1e-6) / 5)
    p, recurrence = 0.0, []
    for _ in range(max(COUNTS)):
        p = min(math.exp(epsilon) * p + delta_k, 1 - math.exp(-epsilon) * (1 - p - delta_k), 1.0)
        recurrence.append(p)
    np.testing.assert_allclose(ours, [recurrence[n - 1] for n in COUNTS], rtol=1e-12, atol=0)


def test_at_five_keys_per_unit_no_single_rule_is_ahead_of_both_pipelinedp_rules() -> None:
    """The README's statement at G = 5: gaussian_threshold (auto) keeps a key with at least
    PipelineDP's Gaussian probability at every n, the optimal rule with at least its truncated
    geometric's (above), and neither rule is ahead of both: the optimal rule is behind
    PipelineDP's Gaussian from n = 30, gaussian_threshold behind its truncated geometric up to
    n = 20 (by at most 1.7e-6, at n = 10)."""
    loss, delta = PrivacyLoss.pure(Fraction("0.347")), Fraction(1, 10**6)
    counts = np.array(COUNTS)
    gaussian = plan_selection(loss, delta, 5).keep_probability(counts, keys_per_unit=5)
    optimal = plan_selection(loss, delta, 5, rule=Rule.OPTIMAL).keep_probability(counts)
    assert (gaussian >= np.array(PIPELINEDP_GAUSSIAN_G5)).all()
    truncated = np.array(PIPELINEDP_TRUNCATED_GEOMETRIC_G5)
    behind = [n for n, a, b in zip(COUNTS, gaussian, truncated, strict=True) if a < b]
    assert behind == [1, 2, 5, 10, 20]
    assert float((truncated - gaussian).max()) == pytest.approx(1.72e-6, rel=0.01)
    behind = [n for n, a, b in zip(COUNTS, optimal, PIPELINEDP_GAUSSIAN_G5, strict=True) if a < b]
    assert behind == [30, 50, 100, 150, 200]
