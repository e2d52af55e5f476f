"""Consortium releases against a central release of the same pooled data: time and bytes per
site and at the aggregator, and accuracy at t = 0, 1, 2 tolerated sites.

A spec of 10⁴ cells (one key column) × 2 statistics (a count and a bounded sum) at ρ; m sites
(5 and 20 by default), each with `--rows` rows. Per site: `contribute` (engine aggregate, exact
noise share, BFV encryption, the share file) and its bytes. At the aggregator: `aggregate`
(parse and check every ciphertext, add them, write the sum) and `publish` (post-processing, the
ledger's commit, the files); at the key holder: `decrypt`. Central: the same pooled rows through
`publish.prepare` → `draw` at the same ρ (no ledger). Accuracy: the count's and the sum's noise
SD over the central one, exact from the laws (the sum of m shares of σ_s² against the central
σ²), and the count's measured at t = 0 from the decrypted totals minus the exact pooled counts.
Both releases spend the same ρ (the (ε, δ) it implies is printed). Bytes at the aggregator: the
m shares it receives, and the encrypted sum it sends to the key holder.

    .venv/bin/python bench/bench_consortium.py [--sites 5 20] [--rows 20000] [--rho 1/20]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
import time
from fractions import Fraction
from pathlib import Path

import numpy as np
import polars as pl

from dprelease.budget import PrivacyConfig, PrivacyProfiles
from dprelease.consortium import (
    PublicKey,
    aggregate,
    contribute,
    decrypt,
    make_keys,
    parse_consortium,
    plan_release,
    publish,
)
from dprelease.ledger import Ledger
from dprelease.loss import epsilon_of_zcdp
from dprelease.mechanism.noise import exact_sigma2, gaussian_law, summed_gaussian_variance
from dprelease.publish import decide_budget, prepare
from dprelease.spec import parse_spec

CELLS = 10_000
SPEC = {
    "name": "bench",
    "source": "bench",
    "privacy_unit": "pid",
    "max_rows_per_unit": 1,
    "group_by": [{"column": "key", "domain": {"min": 0, "max": CELLS - 1}}],
    "statistics": [
        {"name": "n", "kind": "count"},
        {"name": "amount", "kind": "sum", "column": "amount", "lower": 0, "upper": 100},
    ],
}
DELTA = 1e-6
PRIVACY = {"profile": {"kind": "constant", "bound": 3000}, "measure": "zcdp", "delta": DELTA}


def site_frame(site: int, rows: int) -> pl.DataFrame:
    rng = np.random.default_rng(site)
    return pl.DataFrame(
        {
            "pid": np.arange(rows) + site * rows,
            "key": rng.integers(0, CELLS, rows),
            "amount": rng.integers(0, 120, rows),
        }
    )


def clocked(fn, *args, **kwargs):  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start


def run(sites: int, rows: int, rho: Fraction, root: Path) -> dict[str, object]:
    names = [f"s{i}" for i in range(sites)]
    consortium = parse_consortium({"name": "bench", "sites": names, "rho": str(rho)})
    resolved = parse_spec(SPEC)
    plan = plan_release(consortium, resolved, None)
    public_path, secret_path = make_keys(root / "keyholder")
    key = PublicKey.parse(public_path.read_bytes(), "public.key")
    frames = [site_frame(i, rows) for i in range(sites)]
    site_seconds, site_bytes = [], 0
    for name, frame in zip(names, frames, strict=True):
        done, seconds = clocked(
            contribute, plan, name, key, frame, store=root / name, out=root / "inbox"
        )
        site_seconds.append(seconds)
        site_bytes = done.size
    ledger = Ledger(str(root / "ledger.sqlite"), mode="create")
    privacy = PrivacyProfiles(PrivacyConfig.from_mapping(PRIVACY, path_prefix="privacy"), {})
    budget = decide_budget(resolved, scope="bench", privacy=privacy, ledger=ledger, rho=rho)
    shares = sorted((root / "inbox").glob("*.dpshare"))
    summed, aggregate_s = clocked(
        aggregate, plan, key, shares, ledger=ledger, budget=budget, out=root / "aggregator"
    )
    totals = root / "aggregator" / "totals.json"
    _, decrypt_s = clocked(decrypt, secret_path, summed.sum_path, totals)
    _, publish_s = clocked(
        publish, plan, summed.sum_path, totals, ledger=ledger, budget=budget, out=root / "release"
    )
    pooled = pl.concat(frames)
    central_budget = decide_budget(resolved, rho=rho, privacy=privacy)
    prepared, prepare_s = clocked(prepare, pooled, resolved, central_budget)
    _, draw_s = clocked(prepared.draw)
    exact = (
        pl.DataFrame({"key": np.arange(CELLS)})
        .join(pooled.group_by("key").len(), on="key", how="left")
        .fill_null(0)["len"]
        .to_numpy()
    )
    noise = np.array(json.loads(totals.read_text())["totals"]["n"]) - exact
    central_sds = [
        math.sqrt(gaussian_law(exact_sigma2(Fraction(n.delta2_squared) / (2 * n.rho))).variance)
        for n in plan.noise
    ]
    central_sd = central_sds[0]
    accuracy: dict[int, list[float]] = {}  # per t: the count's and the sum's SD over central
    for t in (0, 1, 2):
        tolerant = parse_consortium({"name": "b", "sites": names, "rho": str(rho), "tolerate": t})
        accuracy[t] = [
            math.sqrt(summed_gaussian_variance(n.sigma2, sites)) / sd
            for n, sd in zip(plan_release(tolerant, resolved, None).noise, central_sds, strict=True)
        ]
    ledger.close()
    return {
        "sites": sites,
        "site_seconds_median": float(np.median(site_seconds)),
        "site_bytes": site_bytes,
        "aggregator_in_bytes": sum(share.stat().st_size for share in shares),
        "aggregate_seconds": aggregate_s,
        "sum_bytes": summed.sum_path.stat().st_size,
        "decrypt_seconds": decrypt_s,
        "publish_seconds": publish_s,
        "central_seconds": prepare_s + draw_s,
        "central_sd": central_sd,
        "measured_sd_t0": float(noise.std()),
        "sd_ratio": accuracy,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sites", type=int, nargs="+", default=[5, 20])
    parser.add_argument("--rows", type=int, default=20_000, help="rows per site")
    parser.add_argument("--rho", type=Fraction, default=Fraction(1, 20))
    args = parser.parse_args()
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    epsilon = epsilon_of_zcdp(args.rho, DELTA)
    print(
        f"cores {os.cpu_count()}, load {load}; {CELLS} cells × 2 statistics, {args.rows} rows "
        f"per site, ρ = {args.rho} (ε = {epsilon:.3f} at δ = {DELTA:g}) for both releases"
    )
    print(
        "| sites | site s (median) | share bytes | aggregator in bytes | aggregate s | sum bytes "
        "| decrypt s | publish s | central s | count SD central | measured SD (t=0) "
        "| count SD ratio t=0/1/2 | sum SD ratio t=0/1/2 |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for sites in args.sites:
        with tempfile.TemporaryDirectory() as directory:
            r = run(sites, args.rows, args.rho, Path(directory))
        ratio = r["sd_ratio"]
        assert isinstance(ratio, dict)
        count, total = (" / ".join(f"{ratio[t][k]:.3f}" for t in (0, 1, 2)) for k in (0, 1))
        print(
            f"| {sites} | {r['site_seconds_median']:.2f} | {r['site_bytes']:,} | "
            f"{r['aggregator_in_bytes']:,} | {r['aggregate_seconds']:.2f} | {r['sum_bytes']:,} | "
            f"{r['decrypt_seconds']:.2f} | {r['publish_seconds']:.2f} | "
            f"{r['central_seconds']:.2f} | {r['central_sd']:.2f} | {r['measured_sd_t0']:.2f} | "
            f"{count} | {total} |"
        )


if __name__ == "__main__":
    main()
