"""Local DP: do dprelease's estimators agree with pure-ldp's and multi-freq-ldpy's on the same
randomized data, and do the real randomizers give unbiased estimates with covering margins?

    bash bench/setup.sh      # .venv-bench with pure-ldp, multi-freq-ldpy (bench/requirements.txt)
    .venv-bench/bin/python bench/bench_local.py          # agreement + 1,000 real k-RR waves
    .venv-bench/bin/python bench/bench_local.py --waves 0  # agreement only (seconds)

Reports are drawn by dprelease's own randomizers (exact, from os.urandom) from NHANES II columns
(docs/data/nhanes2.csv, 10,337 respondents): `race` (3 answers, k-RR) and `stratid` (31 strata,
OUE and OLH) at ε = 1. The same reports go to each library's aggregator:

* k-RR: pure-ldp's DEServer, multi-freq-ldpy's GRR_Aggregator_MI;
* OUE: pure-ldp's UEServer(use_oue=True), multi-freq-ldpy's UE_Aggregator_MI;
* OLH: both libraries hash with xxhash, so their aggregators cannot read dprelease's reports
  (universal hash mod 2^31 − 1); their estimators are applied to dprelease's support counts
  (pure-ldp's LHServer formula, multi-freq-ldpy's MI with q = 1/g): they assume a collision
  rate of exactly 1/g, dprelease uses the family's exact rate c (|c − 1/g| < 1e-9).

multi-freq-ldpy's MI clips negative frequencies to 0 and renormalizes; dprelease's unbiased
estimates are compared after the same step, and dprelease's projection onto the simplex with
pure-ldp's `project_probability_simplex`. Then `--waves` waves of the real Python k-RR
randomizer on `race` measure bias (in standard errors), variance against the formula and the
coverage of the 95% margins. The numbers are printed as markdown.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import platform
import time
from fractions import Fraction
from pathlib import Path

import numpy as np

from dprelease.mechanism.randomized._estimators import (
    Z95,
    debias,
    law_of,
    plug_in_variance,
    project,
    variance,
)
from dprelease.mechanism.randomized._exact import ByteStream
from dprelease.mechanism.randomized._randomizers import Randomizer, make_randomizer, olh_hash

ROOT = Path(__file__).resolve().parent.parent
EPSILON = Fraction(1)


def nhanes(column: str) -> tuple[list[int], list[int]]:
    """The column's domain (sorted) and every respondent's answer."""
    with open(ROOT / "docs" / "data" / "nhanes2.csv", newline="") as handle:
        values = [int(row[column]) for row in csv.DictReader(handle) if row[column]]
    return sorted(set(values)), values


def support_of(randomizer: Randomizer, reports: list) -> np.ndarray:
    """How many reports support each answer (dprelease's definition, report by report)."""
    k = randomizer.k
    support = np.zeros(k)
    for report in reports:
        if randomizer.mechanism == "krr":
            support[randomizer.index(report)] += 1
        elif randomizer.mechanism == "oue":
            support += np.frombuffer(report.encode(), np.uint8) - 48
        else:
            a, b, y = map(int, report.split(":"))
            assert randomizer.g is not None
            support += [olh_hash(a, b, j, randomizer.g) == y for j in range(k)]
    return support


def clip_normalize(counts: np.ndarray) -> np.ndarray:
    clipped = counts.clip(0)
    return clipped / clipped.sum()


def agreement() -> list[tuple[str, str, float, float, float]]:
    """(protocol, column, max |Δ count| vs pure-ldp, max |Δ frequency| vs multi-freq-ldpy,
    max |Δ projected frequency| vs pure-ldp's projection)."""
    from multi_freq_ldpy.estimators.Histogram_estimator import MI
    from multi_freq_ldpy.pure_frequency_oracles.GRR import GRR_Aggregator_MI
    from multi_freq_ldpy.pure_frequency_oracles.UE import UE_Aggregator_MI
    from pure_ldp.core.prob_simplex import project_probability_simplex
    from pure_ldp.frequency_oracles.direct_encoding import DEServer
    from pure_ldp.frequency_oracles.local_hashing import LHServer
    from pure_ldp.frequency_oracles.unary_encoding import UEServer

    rows = []
    for mechanism, column in (("krr", "race"), ("oue", "stratid"), ("olh", "stratid")):
        domain, answers = nhanes(column)
        randomizer = make_randomizer(domain, EPSILON, mechanism)  # type: ignore[arg-type]
        reports = randomizer.randomize_all(answers, ByteStream(os.urandom))
        n, k = len(reports), randomizer.k
        ours = debias(support_of(randomizer, reports)[None, :], np.array([n]), law_of(randomizer))[
            0
        ]
        eps = float(EPSILON)
        if mechanism == "krr":
            server = DEServer(eps, k, index_mapper=lambda x: x)
            for report in reports:
                server.aggregate(randomizer.index(report))
            indexes = [randomizer.index(r) for r in reports]
            theirs_mf = GRR_Aggregator_MI(indexes, k, eps)
        elif mechanism == "oue":
            server = UEServer(eps, k, use_oue=True, index_mapper=lambda x: x)
            vectors = [(np.frombuffer(r.encode(), np.uint8) - 48).astype(int) for r in reports]
            for vector in vectors:
                server.aggregate(vector)
            theirs_mf = UE_Aggregator_MI(vectors, eps, optimal=True)
        else:
            server = LHServer(eps, k, use_olh=True, index_mapper=lambda x: x)
            assert server.g == randomizer.g
            server.aggregated_data = support_of(randomizer, reports)
            server.n = n
            p = math.exp(eps) / (math.exp(eps) + server.g - 1)
            theirs_mf = MI(server.aggregated_data, n, p, 1 / server.g)
        theirs_pl = np.array([server.estimate(i, suppress_warnings=True) for i in range(k)])
        projected, _ = project(ours[None, :], np.array([n]))
        rows.append(
            (
                mechanism,
                f"{column} (k = {k})",
                float(np.abs(ours - theirs_pl).max()),
                float(np.abs(clip_normalize(ours) - theirs_mf).max()),
                float(np.abs(projected[0] / n - project_probability_simplex(ours / n)).max()),
            )
        )
    return rows


def real_waves(waves: int) -> dict[str, float]:
    """`waves` waves of the real k-RR randomizer on NHANES race (ε = 1)."""
    domain, answers = nhanes("race")
    randomizer = make_randomizer(domain, EPSILON, "krr")
    law = law_of(randomizer)
    n = np.array([len(answers)])
    truth = np.bincount([domain.index(a) for a in answers], minlength=randomizer.k)
    estimates, covered = [], []
    start = time.perf_counter()
    stream = ByteStream(os.urandom)
    for _ in range(waves):
        support = support_of(randomizer, randomizer.randomize_all(answers, stream))
        estimate = debias(support[None, :], n, law)
        margin = Z95 * np.sqrt(plug_in_variance(estimate, n, law))
        estimates.append(estimate[0])
        covered.append((np.abs(estimate - truth) <= margin)[0])
    elapsed = time.perf_counter() - start
    values = np.array(estimates)
    formula = variance(truth[None, :].astype(float), n, law)[0]
    bias_z = (values.mean(axis=0) - truth) / np.sqrt(formula / waves)
    return {
        "waves": waves,
        "max |bias| (standard errors)": float(np.abs(bias_z).max()),
        "variance / formula, min": float((values.var(axis=0, ddof=1) / formula).min()),
        "variance / formula, max": float((values.var(axis=0, ddof=1) / formula).max()),
        "coverage, min": float(np.array(covered).mean(axis=0).min()),
        "coverage, max": float(np.array(covered).mean(axis=0).max()),
        "µs per answer": elapsed / (waves * len(answers)) * 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--waves", type=int, default=1_000, help="real k-RR waves (0: none)")
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores; load {os.getloadavg()[0]:.2f}")
    print("\n| protocol | column | max \\|Δ count\\| vs pure-ldp | max \\|Δ share\\| vs "
          "multi-freq-ldpy | max \\|Δ projected share\\| vs pure-ldp |")  # fmt: skip
    print("|---|---|---:|---:|---:|")
    for mechanism, column, counts, shares, projected in agreement():
        print(f"| {mechanism} | {column} | {counts:.3g} | {shares:.3g} | {projected:.3g} |")
    if args.waves:
        print(f"\nreal k-RR randomizer, NHANES race, ε = {EPSILON}:")
        for name, value in real_waves(args.waves).items():
            print(f"- {name}: {value:.4g}")


if __name__ == "__main__":
    main()
