#!/usr/bin/env python3
"""Key selection: keep probabilities of each of our rules against OpenDP, Tumult and PipelineDP,
how `rule: auto` chooses, the policy for units holding many keys measured on real data, and the
time to select keys.

    .venv/bin/python bench/bench_selection.py curves   # needs .venv-bench and .venv-tumult:
                                                       # bash bench/setup.sh; bench/setup_tumult.sh
                                                       # (or --peers DIR holding both)
    .venv/bin/python bench/bench_selection.py auto     # τ, n at 0.9, Σ(1 − p), Debian's keys
    .venv/bin/python bench/bench_selection.py policy   # real data: Debian's package index
    .venv/bin/python bench/bench_selection.py timing   # 10⁷ rows, 10⁵ keys (see `timing`)

`curves`: at the same ε, δ and G (and ρ = ε²/2, δ for zCDP), the probability that a key held by n
units (each holding G keys, the case every peer's bound is for) is released, for G = 1, 2, 5
(`--groups`), for each rule a spec can name (`rule:`) and the weighted policies. Every peer's
number comes from its own code: PipelineDP (its PyDP partition-selection strategies'
`probability_of_keep`), Tumult (the threshold and noise scale `create_partition_selection_
measurement` builds for `get_groups`, then its geometric noise's tail), OpenDP (the smallest
threshold whose privacy map meets δ, then its discrete noise's tail at the threshold rule it
applies: keep when count + noise ≥ threshold; and the next threshold, which meets δ). Ours are
exact. A peer whose environment is missing is skipped with the reason. Below each table: for
every peer that meets δ, which of our rules keep a key with at least its probability at every n
(within SLACK, the peers' floating point), and for each of our rules the peers ahead of it
somewhere, and where our two per-key pure rules cross.

`auto`: for a pure scope and G = 2..20, the optimal rule (Δ-scaling) against the Gaussian
threshold by three summaries of the keep curve, each beside the expected keys released on
Debian's package index (`policy`'s data): which summary picks the rule that releases more.

`policy`: units = Debian binary packages (bookworm main, from apt's package index on this
machine), keys = the packages they depend on; 55 848 units, 35 437 keys, 5.1 keys per unit on
average. For G = 1..20 (each unit bounded to G keys at random) the expected number of keys
released by each policy, computed exactly as the sum of the keys' keep probabilities.

Every number but `timing`'s is an exact probability, independent of the machine's load.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np

from dprelease.loss import PrivacyLoss
from dprelease.mechanism.noise import NoiseSource
from dprelease.mechanism.selection import Policy, Rule, keep_table, plan_selection
from dprelease.mechanism.selection._tails import gaussian_tail, laplace_tail

ROOT = Path(__file__).resolve().parent.parent
COUNTS = (1, 2, 5, 10, 20, 30, 50, 100, 150, 200, 500, 1000)
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


#: Relative slack when comparing keep probabilities: the peers compute theirs in floating point
#: (PyDP's p(1) of its Laplace rule is 2.9e-11 above the δ it was given); a gap below this is
#: rounding, not a difference between mechanisms.
SLACK = 1e-9


@dataclass
class Row:
    """One mechanism's keep probabilities on COUNTS and its lone unit's true δ."""

    keep: np.ndarray
    lone: float
    zcdp: bool
    ours: str | None = None  # our rule's name (None: a peer)
    auto: bool = False


def curves(epsilon: Fraction, delta: Fraction, groups: tuple[int, ...], peers_dir: Path) -> None:
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
            **_peer(peers_dir / ".venv-bench/bin/python", PEERS_BENCH, args),
            **_peer(peers_dir / ".venv-tumult/bin/python", PEERS_TUMULT, args),
        }
        for name, peer in list(peers.items()):
            if "skipped" in peer:
                print(f"- {name}: skipped ({peer['skipped']})")
                del peers[name]
            elif "threshold" in peer and name.startswith("OpenDP"):  # see docs/selection.md
                peers[name + " +1"] = {**peer, "threshold": peer["threshold"] + 1}
        rows = _ours(epsilon, delta, rho, g, counts)
        for name, peer in peers.items():
            zcdp = "zCDP" in name
            if "keep" in peer:
                keep = np.array(peer["keep"])
                rows[name] = Row(keep, 1 - (1 - keep[0]) ** g, zcdp)
            else:
                rows[name] = Row(*_threshold_keep(peer, counts, g), zcdp)
        if len(COUNTS) < 100:  # `--every`: the verdicts only
            _curve_table(epsilon, delta, rho, g, rows)
        _dominance(delta, g, rows)
        if len(COUNTS) < 100:
            _pydp_rounding(epsilon, delta, g, rows)
        _crossing(epsilon, delta, g)


def _ours(
    epsilon: Fraction, delta: Fraction, rho: Fraction, g: int, counts: np.ndarray
) -> dict[str, Row]:
    """Our rules at (ε, δ) and (ρ = ε²/2, δ), each as `rule:` names it, for units holding g
    keys (the case every peer's bound is for); the weighted policies beside."""
    rows: dict[str, Row] = {}
    for loss in (PrivacyLoss.pure(epsilon), PrivacyLoss.zcdp(rho)):
        zcdp = loss.measure.value == "zcdp"
        auto = plan_selection(loss, delta, g)
        chosen = [(Rule.GAUSSIAN, Policy.PER_KEY)]
        if not zcdp:
            chosen = [(Rule.OPTIMAL, Policy.PER_KEY), *chosen, (Rule.LAPLACE, Policy.PER_KEY)]
        if g > 1:
            chosen.append((Rule.LAPLACE if not zcdp else Rule.GAUSSIAN, Policy.WEIGHTED))
        for rule, choice in chosen:
            plan = plan_selection(loss, delta, g, rule=rule, policy=choice)
            name = f"dprelease {rule.value}" + (" weighted" if choice is Policy.WEIGHTED else "")
            name += " (zCDP)" * zcdp
            is_auto = (rule, choice) == (auto.rule, auto.policy)
            proved = plan.lone_delta if plan.lone_delta is not None else plan.delta_bound
            lone = float(delta if proved is None else proved)  # optimal: δ exactly
            keep = plan.keep_probability(counts, keys_per_unit=g)
            rows[name] = Row(keep, lone, zcdp, rule.value, is_auto)
    return rows


def _curve_table(epsilon: Fraction, delta: Fraction, rho: Fraction, g: int, rows: dict) -> None:
    print(
        f"\n## G = {g}: units holding {g} key(s); ε = {float(epsilon)}, δ = {float(delta):g}"
        f" (zCDP rows: ρ = ε²/2 = {float(rho):.6g}, same δ)\n"
    )
    print("| mechanism | lone keys | " + " | ".join(f"n={n}" for n in COUNTS) + " |")
    print("|---|---|" + "---|" * len(COUNTS))
    for name, row in rows.items():
        label = f"**{name} (auto)**" if row.auto else name
        cells = " | ".join(f"{p:.3g}" for p in row.keep)
        print(f"| {label} | {row.lone:.3g} | {cells} |")


def _no_worse(ours: np.ndarray, theirs: np.ndarray) -> list[int]:
    """The counts at which `ours` keeps a key with a lower probability than `theirs`."""
    return [n for n, a, b in zip(COUNTS, ours, theirs, strict=True) if a < b * (1 - SLACK)]


def _dominance(delta: Fraction, g: int, rows: dict[str, Row]) -> None:
    """Per peer that meets δ: our rules (same measure) no worse at every n; then per rule of
    ours, the peers ahead of it somewhere (no single rule is no worse than all)."""
    print()
    peers = {name: row for name, row in rows.items() if row.ours is None}
    ours = {name: row for name, row in rows.items() if row.ours is not None}
    for name, peer in peers.items():
        if peer.lone > float(delta) * (1 + SLACK):
            print(f"- {name}: not compared (its lone keys are released w.p. {peer.lone:.3g} > δ)")
            continue
        same = {n: r for n, r in ours.items() if r.zcdp == peer.zcdp}
        good = [n for n, r in same.items() if not _no_worse(r.keep, peer.keep)]
        shortfalls = [
            float(b - a) / b
            for r in (same[n] for n in good)
            for a, b in zip(r.keep, peer.keep, strict=True)
            if a < b
        ]
        gap = max(shortfalls, default=0.0)
        slack = f" (largest shortfall {gap:.1e} relative: its floating point)" if gap else ""
        verdict = ", ".join(good) if good else "none of ours"
        print(f"- {name}: no worse at every n: {verdict}{slack}")
    for name, row in ours.items():
        if "weighted" in name:
            continue
        ahead = {
            peer: lower
            for peer, p in peers.items()
            if p.zcdp == row.zcdp and p.lone <= float(delta) * (1 + SLACK)
            and (lower := _no_worse(row.keep, p.keep))
        }  # fmt: skip
        said = "; ".join(f"{peer} at n = {lower}" for peer, lower in ahead.items())
        print(f"- {name}{' (auto)' * row.auto}: {'behind ' + said if said else 'never behind'}")


def _pydp_rounding(epsilon: Fraction, delta: Fraction, g: int, rows: dict[str, Row]) -> None:
    """Where PyDP's truncated geometric (the same rule as our optimal one with Δ-scaling) is
    above ours: whether its double lies above the exact p(n), whose interval we hold."""
    peer = rows.get("PipelineDP truncated_geometric")
    if peer is None:
        return
    plan = plan_selection(PrivacyLoss.pure(epsilon), delta, g, rule=Rule.OPTIMAL)
    assert plan.key_loss is not None
    table = keep_table(*plan.key_loss)
    ours = rows["dprelease optimal"].keep
    above = [n for n, a, b in zip(COUNTS, ours, peer.keep, strict=True) if b > a]
    if not above:
        print("- PipelineDP truncated_geometric is nowhere above dprelease optimal")
    for n in above:
        b = Fraction(float(peer.keep[COUNTS.index(n)]))
        lo, hi = table.bounds(n)
        where = "above the exact p(n)" if b > hi else "inside the exact p(n)'s interval"
        print(
            f"- PipelineDP truncated_geometric above dprelease optimal at n = {n} by"
            f" {float(b - Fraction(float(ours[COUNTS.index(n)]))):.1e}: its double is {where}"
            f" [{float(lo)!r}, {float(hi)!r}]"
        )


def _crossing(epsilon: Fraction, delta: Fraction, g: int) -> None:
    """Where our two per-key pure rules cross, n = 1..1000: the counts from which
    gaussian_threshold keeps a key with the higher probability, and back."""
    loss, n = PrivacyLoss.pure(epsilon), np.arange(1, 1001)
    if g == 1:
        return
    optimal = plan_selection(loss, delta, g, rule=Rule.OPTIMAL).keep_probability(n)
    gaussian = plan_selection(loss, delta, g, rule=Rule.GAUSSIAN).keep_probability(n)
    apart = np.abs(gaussian - optimal) > 1e-9 * np.maximum(gaussian, optimal)
    above = np.where(apart, gaussian > optimal, False)
    changes = [int(n[i]) for i in range(1, n.size) if apart[i] and above[i] != above[i - 1]]
    print(
        f"- gaussian_threshold above optimal from n = {changes[0::2]}, below again from n ="
        f" {changes[1::2]} (n = 1..1000, where they differ by more than 1e-9 relative)"
    )


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


# --------------------------------------------------------------------------- auto


def _first(keep: np.ndarray, level: float) -> int:
    """The smallest n (keep[n − 1]) at which a key is kept with probability ≥ `level`."""
    return int(np.argmax(keep >= level)) + 1


def auto(epsilons: tuple[str, ...], delta: Fraction, groups: tuple[int, ...]) -> None:
    """How `rule: auto` should choose between the optimal rule (Δ-scaling) and the Gaussian
    threshold in a pure scope, per key: by τ (the n kept with probability ≥ 1/2, today's rule),
    by the n kept with probability ≥ 0.9, or by Σ_n (1 − p(n)) (the mean n at which a key held
    by growing numbers of units is first kept); each against the expected keys released on
    Debian's package index, the real data of `policy`. Exact probabilities, n = 1..4000."""
    units = debian_dependencies() if sorted(PACKAGES.glob("*_main_binary-amd64_Packages*")) else {}
    n = np.arange(1, 4001)
    print(f"\n## auto: optimal (o) against gaussian_threshold (g), pure, per key, δ = {delta}\n")
    print("| ε | G | τ o/g | n at p ≥ 0.9 o/g | Σ(1 − p) o/g | Debian keys o/g | auto | best |")
    print("|---|---|---|---|---|---|---|---|")
    for text in epsilons:
        loss = PrivacyLoss.pure(Fraction(text))
        for g in groups:
            plans = [plan_selection(loss, delta, g, rule=r) for r in (Rule.OPTIMAL, Rule.GAUSSIAN)]
            keep = [plan.keep_probability(n) for plan in plans]
            taus = [plan.tau() for plan in plans]
            nineties = [_first(k, 0.9) for k in keep]
            means = [float((1 - k).sum()) for k in keep]
            table = units_table(units, g) if units else None
            keys = [expected_released(plan, table) for plan in plans] if units else [0.0, 0.0]
            chosen = plan_selection(loss, delta, g).rule
            best = "o" if keys[0] >= keys[1] else "g"
            print(
                f"| {text} | {g} | {taus[0]}/{taus[1]} | {nineties[0]}/{nineties[1]} |"
                f" {means[0]:.1f}/{means[1]:.1f} | {keys[0]:.1f}/{keys[1]:.1f} |"
                f" {'o' if chosen is Rule.OPTIMAL else 'g'} | {best if units else '–'} |"
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
        "what", choices=["curves", "auto", "policy", "timing", "all"], default="all", nargs="?"
    )
    parser.add_argument("--epsilon", default="0.347")
    parser.add_argument("--delta", default="1e-6")
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--groups", default="1,2,5", help="G values for curves, e.g. 1,2,5")
    parser.add_argument(
        "--every", action="store_true", help="curves: verdicts at every n = 1..1000, no tables"
    )
    parser.add_argument(
        "--peers", type=Path, default=ROOT, help="folder holding .venv-bench and .venv-tumult"
    )
    args = parser.parse_args()
    epsilon, delta = Fraction(args.epsilon), Fraction(args.delta)
    if args.what in ("curves", "all"):
        groups = tuple(int(g) for g in args.groups.split(","))
        if args.every:
            global COUNTS
            COUNTS = tuple(range(1, 1001))
        curves(epsilon, delta, groups, args.peers)
    if args.what in ("auto", "all"):
        auto(("0.1", "0.347", "1"), delta, (2, 3, 4, 5, 10, 20))
    if args.what in ("policy", "all"):
        policy(("0.1", "0.347", "1"), delta, (1, 2, 3, 4, 5, 10, 20))
    if args.what in ("timing", "all"):
        timing(args.rows, args.keys)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
