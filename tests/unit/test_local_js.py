"""The JavaScript randomizer (dprelease/local/randomize.js) under Node: its own unit tests, the
same reports as the Python randomizers from the same bytes, its exact law (χ²), an empirical
privacy audit, and a two-sample χ² against the Python randomizers.

The statistical tests draw from the platform's CSPRNG, unseeded on purpose: they test the path
a questionnaire takes (crypto.getRandomValues), which fixed bytes would bypass (those are the
identity test's). So each fails a correct module with probability 1e-6 (P_MIN; the audits:
local_audit.ALPHA), about 1e-5 for the whole file.

Node is required in CI (.ci/run installs Debian's nodejs); elsewhere these tests are skipped
when it is missing (local_audit.node).
"""

from __future__ import annotations

import os
import subprocess
from collections import Counter
from fractions import Fraction

import pytest
from helpers import ROOT
from local_audit import (
    chi2_pvalue,
    epsilon_lower_bound,
    event_of,
    fixed_reader,
    krr_law,
    node,
    olh_support_law,
    oue_law,
    run_js,
)
from scipy import stats

import dprelease as dp
from dprelease.mechanism.noise import NoiseSource
from dprelease.mechanism.randomized._exact import ByteStream
from dprelease.mechanism.randomized._randomizers import RANDOMIZER_VERSION, make_randomizer

P_MIN = 1e-6


def test_node_unit_tests_pass() -> None:
    done = subprocess.run(
        [node(), "--test", "tests/js/"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "# fail 0" in done.stdout


def test_the_module_is_installed_with_the_package_and_states_the_python_version() -> None:
    assert dp.local.js_module_path().is_file()
    assert dp.local.js_module_path().parent == ROOT / "dprelease" / "local"
    assert run_js({"version": True})["version"] == RANDOMIZER_VERSION


TEXTS = ["não", "日本", 'say "no"', "back\\slash", "tab\t", "\u2028"]


@pytest.mark.parametrize("domain", [TEXTS, [0, 7, -3], [True, False]])
def test_both_languages_seal_a_configuration_alike(domain: list) -> None:
    """The module recomputes the wave_hash Python sealed the configuration with (canonical JSON,
    UTF-8, SHA-256), whatever the answers' text, so a page with the printed configuration runs
    and an edited one is refused (tests/js: the refusals)."""
    config = make_randomizer(domain, Fraction(1, 3)).config(wave="w-1", question="q")
    assert run_js({"hash": config})["hash"] == config["wave_hash"]


CONFIGS = [
    ("krr", Fraction(1), ["never", "once", "monthly", "weekly"]),
    ("krr", Fraction(7, 2), list(range(40))),
    ("krr", Fraction(1, 1000), [True, False]),
    ("oue", Fraction(1, 3), [1, 2, 3, 4, 5]),
    ("oue", Fraction(3), ["a", "b", "c"]),
    ("olh", Fraction(5, 2), ["x", "y", "z"]),
    ("olh", Fraction(1, 10), list(range(100))),
]


@pytest.mark.parametrize(("mechanism", "epsilon", "domain"), CONFIGS)
def test_the_same_bytes_give_the_same_reports_in_both_languages(
    mechanism: str, epsilon: Fraction, domain: list
) -> None:
    """Both run one algorithm on one byte stream: every report is identical, byte for byte."""
    randomizer = make_randomizer(domain, epsilon, mechanism)  # type: ignore[arg-type]
    answers = [domain[(i * 7) % len(domain)] for i in range(400)]
    data = os.urandom(400_000)
    python = randomizer.randomize_all(answers, ByteStream(fixed_reader(data)))
    job = {"config": randomizer.config(), "answers": answers, "bytes": data.hex()}
    assert run_js(job)["reports"] == python


def _js_reports(randomizer, answer: object, n: int) -> list:  # type: ignore[no-untyped-def]
    return run_js({"config": randomizer.config(), "answers": [answer] * n})["reports"]


def test_js_krr_follows_the_exact_law() -> None:
    randomizer = make_randomizer(["never", "once", "monthly", "weekly"], Fraction(1), "krr")
    counts = Counter(_js_reports(randomizer, "once", 40_000))
    law = krr_law(randomizer, 1)
    assert chi2_pvalue([counts[a] for a in randomizer.domain], law) > P_MIN


def test_js_oue_follows_the_exact_law() -> None:
    randomizer = make_randomizer([10, 20, 30], Fraction(1, 2), "oue")
    counts = Counter(_js_reports(randomizer, 30, 40_000))
    law = oue_law(randomizer, 2)
    assert chi2_pvalue([counts[b] for b in law], law.values()) > P_MIN


def test_js_olh_follows_the_exact_law() -> None:
    randomizer = make_randomizer(list(range(5)), Fraction(2), "olh")
    event = event_of(randomizer, 3, 0)
    counts = Counter(map(event, _js_reports(randomizer, 3, 40_000)))
    law = olh_support_law(randomizer)
    assert chi2_pvalue([counts[e] for e in law], law.values()) > P_MIN


@pytest.mark.parametrize(
    ("mechanism", "domain"),
    [("krr", ["yes", "no", "refuse"]), ("oue", [0, 1, 2]), ("olh", [True, False])],
)
def test_js_audit_finds_no_excess_privacy_loss(mechanism: str, domain: list) -> None:
    """As the Python audit (test_local_randomizers), on reports drawn by the JavaScript module
    from crypto.getRandomValues: bound ≤ ε (false alarm ≤ 1e-6), and sharp."""
    randomizer = make_randomizer(domain, Fraction(1), mechanism)  # type: ignore[arg-type]
    event = event_of(randomizer, 0, 1)
    n = 100_000
    counts_v = Counter(map(event, _js_reports(randomizer, domain[0], n)))
    counts_w = Counter(map(event, _js_reports(randomizer, domain[1], n)))
    assert 0.85 < epsilon_lower_bound(counts_v, counts_w, n) <= 1


def test_python_and_javascript_draw_the_same_law() -> None:
    """Two independent samples, Python's (seeded) and JavaScript's (its CSPRNG): a two-sample χ²
    of the audit's events of OLH and of k-RR's reports does not tell them apart."""
    for mechanism, domain in (("krr", ["a", "b", "c", "d", "e"]), ("olh", list(range(6)))):
        randomizer = make_randomizer(domain, Fraction(3, 2), mechanism)  # type: ignore[arg-type]
        event = event_of(randomizer, 1, 4)
        python = Counter(
            map(
                event,
                dp.local.randomize(
                    [domain[1]] * 30_000,
                    domain=domain,
                    epsilon=Fraction(3, 2),
                    mechanism=mechanism,  # type: ignore[arg-type]
                    source=NoiseSource.seeded_for_tests(40),
                    allow_unsafe_noise=True,
                ),
            )
        )
        javascript = Counter(map(event, _js_reports(randomizer, domain[1], 30_000)))
        events = sorted(set(python) | set(javascript))
        table = [[python[e] for e in events], [javascript[e] for e in events]]
        assert stats.chi2_contingency(table).pvalue > P_MIN
