"""What the local-DP tests share: the exact output laws of the randomizers, the events an
empirical privacy audit counts, the audit itself, and running the JavaScript module under Node.

The audit: a randomizer is run N times on answer v and N times on answer w; for every event E of
the report, Clopper–Pearson bounds give, with confidence 1 − α each, P(E | v) ≥ lower and
P(E | w) ≤ upper, so ln(lower/upper) is a lower bound on the privacy loss. An ε-LDP randomizer
never shows one above ε except with probability at most the Bonferroni sum of the α's (ALPHA).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

import pytest
from helpers import ROOT

from dprelease.mechanism.randomized._estimators import collision
from dprelease.mechanism.randomized._randomizers import Randomizer, olh_hash

#: Total false-alarm rate of one audit (a correct randomizer failing it), split over its bounds.
ALPHA = 1e-6
NODE_RUNNER = ROOT / "tests" / "js" / "run_randomizer.mjs"


def krr_law(randomizer: Randomizer, value: int) -> list[float]:
    """P(report = answer j) for k-RR (or OLH's buckets: the same law over g)."""
    e = math.exp(randomizer.epsilon)
    k = randomizer.k
    return [(e if j == value else 1.0) / (e + k - 1) for j in range(k)]


def oue_law(randomizer: Randomizer, value: int) -> dict[str, float]:
    """P(report = each bit string) for OUE: independent bits, 1/2 for the answer's own."""
    q = 1 / (1 + math.exp(randomizer.epsilon))
    out = {}
    for pattern in range(2**randomizer.k):
        bits = format(pattern, f"0{randomizer.k}b")
        p = 1.0
        for j, bit in enumerate(bits):
            one = 0.5 if j == value else q
            p *= one if bit == "1" else 1 - one
        out[bits] = p
    return out


def olh_offset_law(randomizer: Randomizer) -> list[float]:
    """P((y − h(answer)) mod g = d) for OLH: g-ary randomized response around the hash."""
    assert randomizer.g is not None
    e = math.exp(randomizer.epsilon)
    g = randomizer.g
    return [(e if d == 0 else 1.0) / (e + g - 1) for d in range(g)]


def olh_parts(report: str) -> tuple[int, int, int]:
    a, b, y = (int(part) for part in report.split(":"))
    return a, b, y


def event_of(randomizer: Randomizer, v: int, w: int) -> Callable[[Any], str]:
    """The audit's event of a report, for answers (indexes) v and w: k-RR the report itself;
    OUE the bits of v and w; OLH whether the report supports v and whether it supports w."""
    if randomizer.mechanism == "krr":
        return lambda report: str(report)
    if randomizer.mechanism == "oue":
        return lambda report: report[v] + report[w]
    assert randomizer.g is not None
    g = randomizer.g

    def supports(report: str) -> str:
        a, b, y = olh_parts(report)
        return f"{int(olh_hash(a, b, v, g) == y)}{int(olh_hash(a, b, w, g) == y)}"

    return supports


def epsilon_lower_bound(
    counts_v: Counter[str], counts_w: Counter[str], draws: int, alpha: float = ALPHA
) -> float:
    """The audit's lower bound on ε from event counts of `draws` reports under each answer."""
    from scipy import stats

    events = sorted(set(counts_v) | set(counts_w))
    each = alpha / (4 * len(events))  # two bounds per ratio, two directions per event
    best = -math.inf
    for event in events:
        a, b = counts_v[event], counts_w[event]
        for hit, other in ((a, b), (b, a)):
            if hit == 0:
                continue
            lower = stats.beta.ppf(each, hit, draws - hit + 1)
            upper = stats.beta.ppf(1 - each, other + 1, draws - other) if other < draws else 1.0
            best = max(best, math.log(lower / upper))
    return best


def olh_support_law(randomizer: Randomizer) -> dict[str, float]:
    """P(supports v, supports w | answer v) for OLH, exactly (c: the family's collision
    probability)."""
    assert randomizer.g is not None
    e, g = math.exp(randomizer.epsilon), randomizer.g
    p, q = e / (e + g - 1), 1 / (e + g - 1)
    c = float(collision(randomizer.g))
    # kept (p): v supported, w too iff h(w) = h(v) (c). Not kept: the bucket is each b ≠ h(v)
    # with probability q, and w is supported iff h(w) = b, one of them when h(w) ≠ h(v).
    return {"11": p * c, "10": p * (1 - c), "01": q * (1 - c), "00": 1 - p - q * (1 - c)}


def chi2_pvalue(observed: Iterable[int], expected_probabilities: Iterable[float]) -> float:
    """χ² goodness of fit of category counts to exact probabilities (cells with expected counts
    below 5 merged into one)."""
    from scipy import stats

    obs = list(observed)
    probs = list(expected_probabilities)
    n = sum(obs)
    big = [(o, p) for o, p in zip(obs, probs, strict=True) if n * p >= 5]
    small = [(o, p) for o, p in zip(obs, probs, strict=True) if n * p < 5]
    if small:
        big.append((sum(o for o, _ in small), sum(p for _, p in small)))
    f_obs = [o for o, _ in big]
    f_exp = [n * p for _, p in big]
    return float(stats.chisquare(f_obs, f_exp).pvalue)


def fixed_reader(data: bytes) -> Callable[[int], bytes]:
    """A reader of `data`, then zeros: the deterministic byte stream both languages are fed
    (tests/js/run_randomizer.mjs pads the same way)."""
    position = 0

    def read(n: int) -> bytes:
        nonlocal position
        out = data[position : position + n].ljust(n, b"\0")
        position += n
        return out

    return read


def node() -> str:
    """The `node` executable; skipped where Node is missing, except in CI (.ci/run installs
    Debian's nodejs), where its absence fails."""
    found = shutil.which("node")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("node is missing: CI must run the JavaScript randomizer's tests")
        pytest.skip("node is not installed: the JavaScript randomizer is tested where it is")
    return found


def run_js(job: dict[str, Any]) -> dict[str, Any]:
    """Run the JavaScript module on one job (see tests/js/run_randomizer.mjs)."""
    done = subprocess.run(
        [node(), str(NODE_RUNNER)],
        input=json.dumps(job),
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)
