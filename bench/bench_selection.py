#!/usr/bin/env python3
"""Key selection: keep probabilities against OpenDP, Tumult and PipelineDP, the policy for units
holding many keys measured on real data, and the time to select keys.

    .venv/bin/python bench/bench_selection.py curves   # needs .venv-bench and .venv-tumult:
                                                       # bash bench/setup.sh; bench/setup_tumult.sh
    .venv/bin/python bench/bench_selection.py policy   # real data: Debian's package index
    .venv/bin/python bench/bench_selection.py timing   # 10⁷ rows, 10⁵ keys (see `timing`)

`curves`: at the same ε and δ (and ρ, δ for zCDP), the probability that a key held by n units is
released, for one and for G keys per unit. Every peer's number comes from its own code: PipelineDP
(its PyDP partition-selection strategies' `probability_of_keep`), Tumult (the threshold and noise
scale `create_partition_selection_measurement` builds for `get_groups`, then its geometric noise's
tail), OpenDP (the smallest threshold whose privacy map meets δ, then its discrete noise's tail at
the threshold rule it applies: keep when count + noise ≥ threshold). Ours are exact. A peer whose
environment is missing is skipped with the reason. For each threshold rule the release
probability of a key held by one unit (its true δ) is printed beside the δ it was asked for.

`policy`: units = Debian binary packages (bookworm main, from apt's package index on this
machine), keys = the packages they depend on; 55 848 units, 35 437 keys, 5.1 keys per unit on
average. For G = 1..20 (each unit bounded to G keys at random) the expected number of keys
released by each policy, computed exactly as the sum of the keys' keep probabilities.

Figures here are provisional (a shared 2-core machine); the coordinator re-measures.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import numpy as np

from dprelease.loss import PrivacyLoss
from dprelease.mechanism.noise import NoiseSource
from dprelease.mechanism.selection import Policy, Rule, plan_selection
from dprelease.mechanism.selection._tails import gaussian_tail, laplace_tail

ROOT = Path(__file__).resolve().parent.parent
COUNTS = (1, 2, 5, 10, 20, 30, 40, 50, 75, 100, 150, 200, 300, 500, 1000)
PACKAGES = Path("/var/lib/apt/lists")

# --------------------------------------------------------------------------- peers

PEERS_BENCH = r"""
import json, math, sys
args = json.loads(sys.argv[1]); eps, delta, rho, g, counts = (args[k] for k in
    ("epsilon", "delta", "rho", "g", "counts"))
out = {}
try:
    import pydp.algorithms.partition_selection as ps
    for name in ("truncated_geometric", "laplace", "gaussian"):
        strategy = ps.create_partition_strategy(name, eps, delta, g)
        out["PipelineDP " + name] = {"keep": [strategy.probability_of_keep(n) for n in counts]}
except Exception as exc:  # reported, not hidden
    out["PipelineDP"] = {"skipped": f"{type(exc).__name__}: {exc}"}
try:
    import opendp.prelude as dp
    dp.enable_features("contrib")
    domain = dp.map_domain(dp.atom_domain(T=str), dp.atom_domain(T=int))
    def smallest(make, metric, scale, d_in):
        threshold = 1
        while make(domain, metric, scale=scale, threshold=threshold).map(d_in)[1] > delta:
            threshold += 1
        return threshold
    scale = g / eps
    l1 = dp.l01inf_distance(dp.absolute_distance(T=int))
    out["OpenDP laplace_threshold"] = {"threshold": smallest(dp.m.make_laplace_threshold, l1,
        scale, (g, g, 1)), "scale": scale}
    sigma = math.sqrt(g / (2 * rho))
    l2 = dp.l02inf_distance(dp.absolute_distance(T=int))
    out["OpenDP gaussian_threshold (zCDP)"] = {"threshold": smallest(
        dp.m.make_gaussian_threshold, l2, sigma, (g, g, 1)), "sigma2": sigma * sigma}
except Exception as exc:
    out["OpenDP"] = {"skipped": f"{type(exc).__name__}: {exc}"}
print(json.dumps(out))
"""

PEERS_TUMULT = r"""
import json, sys
args = json.loads(sys.argv[1])
from tmlt.core.domains.spark_domains import SparkDataFrameDomain, SparkStringColumnDescriptor
from tmlt.core.measurements.aggregations import create_partition_selection_measurement
domain = SparkDataFrameDomain({"key": SparkStringColumnDescriptor()})
m = create_partition_selection_measurement(domain, epsilon=args["epsilon_text"],
    delta=args["delta_text"], d_in=args["g"])
print(json.dumps({"Tumult get_groups": {"threshold": int(m.threshold),
    "scale": m.alpha.to_float(round_up=False)}}))
"""


def _peer(python: Path, code: str, args: dict) -> dict:
    if not python.exists():
        setup = "setup.sh" if "bench" in python.parent.parent.name else "setup_tumult.sh"
        return {python.parent.parent.name: {"skipped": f"{python} missing: run bash bench/{setup}"}}
    done = subprocess.run(
        [str(python), "-c", code, json.dumps(args)], capture_output=True, text=True, timeout=600
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {python.parent.parent.name: {"skipped": last}}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _threshold_keep(peer: dict, counts: np.ndarray, g: int) -> tuple[np.ndarray, float]:
    """Keep probabilities of a 'count + noise ≥ threshold' peer, and its lone unit's true δ."""
    threshold = peer["threshold"]
    if "sigma2" in peer:
        tail = gaussian_tail(Fraction(peer["sigma2"]), threshold - counts)
        lone = gaussian_tail(Fraction(peer["sigma2"]), np.array([threshold - 1]))[0]
    else:
        tail = laplace_tail(Fraction(peer["scale"]), threshold - counts)
        lone = laplace_tail(Fraction(peer["scale"]), np.array([threshold - 1]))[0]
    return tail, 1 - (1 - lone) ** g


def curves(epsilon: Fraction, delta: Fraction, groups: tuple[int, ...]) -> None:
    rho = epsilon * epsilon / 2
    counts = np.array(COUNTS)
    for g in groups:
        args = {
            "epsilon": float(epsilon),
            "delta": float(delta),
            "rho": float(rho),
            "g": g,
            "counts": list(COUNTS),
            "epsilon_text": str(epsilon),
            "delta_text": str(delta),
        }
        peers = {
            **_peer(ROOT / ".venv-bench/bin/python", PEERS_BENCH, args),
            **_peer(ROOT / ".venv-tumult/bin/python", PEERS_TUMULT, args),
        }
        for name, peer in list(peers.items()):
            if "skipped" in peer:
                print(f"- {name}: skipped ({peer['skipped']})")
                del peers[name]
            elif "threshold" in peer and name.startswith("OpenDP"):  # see the module docstring
                peers[name + " +1"] = {**peer, "threshold": peer["threshold"] + 1}
        for held in sorted({g, 1}, reverse=True):
            _curve_table(epsilon, delta, rho, g, held, counts, peers)


def _curve_table(
    epsilon: Fraction,
    delta: Fraction,
    rho: Fraction,
    g: int,
    held: int,
    counts: np.ndarray,
    peers: dict,
) -> None:
    """One table: keys held by n units that each hold `held` of at most g keys."""
    print(
        f"\n## G = {g}, units holding {held} key(s); ε = {float(epsilon)}, δ = {float(delta):g}"
        f" (zCDP rows: ρ = ε²/2 = {float(rho):.6g}, same δ)"
    )
    rows: dict[str, tuple[np.ndarray, float]] = {}
    for loss in (PrivacyLoss.pure(epsilon), PrivacyLoss.zcdp(rho)):
        pure = loss.measure.value == "pure"
        if pure:
            chosen = [(Rule.OPTIMAL, Policy.PER_KEY)]
            chosen += [(Rule.GAUSSIAN, Policy.PER_KEY), (Rule.LAPLACE, Policy.WEIGHTED)] * (g > 1)
        else:
            chosen = [(Rule.GAUSSIAN, Policy.PER_KEY)] + [(Rule.GAUSSIAN, Policy.WEIGHTED)] * (
                g > 1
            )
        default = plan_selection(loss, delta, g)
        for rule, choice in chosen:
            plan = plan_selection(loss, delta, g, rule=rule, policy=choice)
            tag = "" if pure else " (zCDP)"
            mark = ", default" if (rule, choice) == (default.rule, default.policy) else ""
            name = f"dprelease {plan.rule.value} {plan.policy.value}{tag}{mark}"
            rows[name] = (plan.keep_probability(counts, keys_per_unit=held), float(delta))
    for name, peer in peers.items():
        if "keep" in peer:
            keep = np.array(peer["keep"])
            rows[name] = (keep, 1 - (1 - keep[0]) ** g)
        else:
            rows[name] = _threshold_keep(peer, counts, g)
    print("\n| mechanism | true δ | " + " | ".join(f"n={n}" for n in COUNTS) + " |")
    print("|---|---|" + "---|" * len(COUNTS))
    for name, (keep, lone) in rows.items():
        cells = " | ".join(f"{p:.3g}" for p in keep)
        print(f"| {name} | {lone:.3g} | {cells} |")
    for ours_name, (ours, _) in rows.items():
        if not (ours_name.startswith("dprelease") and ours_name.endswith("default")):
            continue
        zcdp = "zCDP" in ours_name
        for name, (keep, lone) in rows.items():
            if name.startswith("dprelease") or ("zCDP" in name) != zcdp:
                continue
            if lone > float(delta) * (1 + 1e-9):
                print(f"- {ours_name} vs {name}: not compared (its true δ {lone:.3g} > δ)")
                continue
            lower = [
                n
                for n, a, b in zip(COUNTS[1:], ours[1:], keep[1:], strict=True)
                if a < b * (1 - 1e-9) and b >= 0.01
            ]
            verdict = (
                f"ours lower at n = {lower}"
                if lower
                else "never lower where the peer keeps a key with probability ≥ 1%"
            )
            print(f"- {ours_name} vs {name}: {verdict}")


# --------------------------------------------------------------------------- policy


def debian_dependencies() -> dict[str, set[str]]:
    """Debian binary package → the packages it depends on (Depends and Pre-Depends, every
    alternative, versions and architectures stripped), from apt's package index."""
    index = sorted(PACKAGES.glob("*_main_binary-amd64_Packages*"))
    if not index:
        raise SystemExit(f"no package index under {PACKAGES}: run apt-get update")
    reader = ["lz4cat"] if index[0].suffix == ".lz4" else ["cat"]
    text = subprocess.run([*reader, str(index[0])], capture_output=True, text=True).stdout
    units: dict[str, set[str]] = {}
    package = ""
    for line in text.splitlines():
        if line.startswith("Package: "):
            package = line[9:].strip()
        elif line.startswith(("Depends: ", "Pre-Depends: ")):
            for part in line.split(": ", 1)[1].split(","):
                for alternative in part.split("|"):
                    name = re.sub(r"[ (\[:].*", "", alternative.strip())
                    if name:
                        units.setdefault(package, set()).add(name)
    return units


def units_table(units: dict[str, set[str]], g: int, seed: int = 0) -> np.ndarray:
    """units[k, h − 1]: units holding key k that hold h keys after bounding each to g at random."""
    rng = np.random.default_rng(seed)
    table: dict[str, np.ndarray] = collections.defaultdict(lambda: np.zeros(g, np.int64))
    for keys in units.values():
        held = sorted(keys)
        if len(held) > g:
            held = list(rng.choice(held, g, replace=False))
        for key in held:
            table[key][len(held) - 1] += 1
    return np.array(list(table.values()))


def expected_released(plan, table: np.ndarray) -> float:  # type: ignore[no-untyped-def]
    """Σ over keys of the exact keep probability (no randomness)."""
    held = table.sum(axis=1)
    if plan.rule is Rule.OPTIMAL:
        distinct, inverse = np.unique(held, return_inverse=True)
        return float(plan.keep_probability(distinct)[inverse].sum())
    weight = (
        held * plan.weights[0] if plan.policy is Policy.PER_KEY else table @ np.array(plan.weights)
    )
    tail = laplace_tail if plan.rule is Rule.LAPLACE else gaussian_tail
    distinct, inverse = np.unique(weight, return_inverse=True)
    return float(tail(plan.scale, plan.threshold - distinct)[inverse].sum())


def policy(epsilons: tuple[str, ...], delta: Fraction, groups: tuple[int, ...]) -> None:
    units = debian_dependencies()
    keys = {k for v in units.values() for k in v}
    print(
        f"\n## policy: {len(units)} units, {len(keys)} keys, "
        f"{np.mean([len(v) for v in units.values()]):.2f} keys per unit; δ = {float(delta):g}"
    )
    print(
        "expected keys released (pure: optimal = Δ-scaling with the optimal rule, gaussian ="
        " discrete Gaussian threshold per key, weighted = Laplace L1 weights; zCDP at ρ = ε²/2:"
        " Gaussian per_key vs L2 weights)\n"
    )
    print(
        "| ε | G | pure optimal | pure gaussian | pure weighted | zCDP per_key | zCDP weighted"
        " | pure default |"
    )
    print("|---|---|---|---|---|---|---|---|")
    combos = [
        ("pure", Rule.OPTIMAL, Policy.PER_KEY),
        ("pure", Rule.GAUSSIAN, Policy.PER_KEY),
        ("pure", Rule.LAPLACE, Policy.WEIGHTED),
        ("zcdp", Rule.GAUSSIAN, Policy.PER_KEY),
        ("zcdp", Rule.GAUSSIAN, Policy.WEIGHTED),
    ]
    for text in epsilons:
        epsilon = Fraction(text)
        losses = {"pure": PrivacyLoss.pure(epsilon), "zcdp": PrivacyLoss.zcdp(epsilon**2 / 2)}
        for g in groups:
            table = units_table(units, g)
            cells = []
            for measure, rule, chosen in combos:
                try:
                    plan = plan_selection(losses[measure], delta, g, rule=rule, policy=chosen)
                except ValueError:
                    cells.append("–")
                    continue
                cells.append(f"{expected_released(plan, table):.1f}")
            default = plan_selection(losses["pure"], delta, g)
            print(
                f"| {text} | {g} | "
                + " | ".join(cells)
                + f" | {default.rule.value} {default.policy.value} |"
            )


# --------------------------------------------------------------------------- timing


def timing(rows: int, keys: int) -> None:
    """Time to select keys at `rows` rows and `keys` distinct keys: the reference aggregate
    (`selection.units_per_key`: distinct (unit, key) pairs, each unit bounded to G = 1 key by a
    salted hash, units per key) and the exact draw, beside the two things a count over a public
    domain of the same size does instead: a group-by count and noise for `keys` cells.

    Until selection is integrated in the engines' row plan these are the library's pieces timed
    in one process; after the integration this section compares `dp.release` with and without
    `domain: {select: true}` on the same data (docs/selection.md, phase 2)."""
    import polars as pl

    from dprelease.mechanism.noise import discrete_laplace
    from dprelease.mechanism.selection import units_per_key

    rng = np.random.default_rng(1)
    frame = pl.DataFrame(
        {"person": rng.integers(0, rows // 4, rows), "key": rng.permutation(rows) % keys}
    )
    plan = plan_selection(PrivacyLoss.pure(Fraction("0.347")), Fraction(1, 10**9))
    start = time.perf_counter()
    candidates, table = units_per_key(frame, "person", ["key"], 1, salt=12345)
    aggregate_seconds = time.perf_counter() - start
    start = time.perf_counter()
    kept = plan.select(table, NoiseSource.system())
    select_seconds = time.perf_counter() - start
    start = time.perf_counter()
    frame.group_by("key").len()
    count_seconds = time.perf_counter() - start
    start = time.perf_counter()
    discrete_laplace(Fraction(1000, 347), keys)
    noise_seconds = time.perf_counter() - start
    print(f"\n## timing: {rows} rows, {candidates.height} candidate keys, {int(kept.sum())} kept")
    print(f"- selection aggregate (units per key, G = 1): {aggregate_seconds:.2f} s")
    print(f"- selection draw (optimal rule, exact): {select_seconds:.3f} s")
    print(f"- public domain: group-by count {count_seconds:.2f} s, noise {noise_seconds:.3f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "what", choices=["curves", "policy", "timing", "all"], default="all", nargs="?"
    )
    parser.add_argument("--epsilon", default="0.347")
    parser.add_argument("--delta", default="1e-6")
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    args = parser.parse_args()
    epsilon, delta = Fraction(args.epsilon), Fraction(args.delta)
    if args.what in ("curves", "all"):
        curves(epsilon, delta, (1, 5))
    if args.what in ("policy", "all"):
        policy(("0.1", "0.347", "1"), delta, (1, 2, 3, 4, 5, 10, 20))
    if args.what in ("timing", "all"):
        timing(args.rows, args.keys)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
