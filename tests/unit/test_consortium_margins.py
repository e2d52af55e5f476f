"""Consortium releases with margins, three sites in one process: every level of every
measurement carries its own noise shares (its part of ρ, as a central release splits it), only
the noisy totals of every level are decrypted, and the central release's consistent table,
margins of error and controlled rounding run on them with the summed shares' exact law."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from consortium_world import CONFIG, MONTHLY, PRIVACY, SITES, World, site_data
from consortium_world import parse_privacy_profiles as profiles
from helpers import chi2_pvalue_of_pmf

from dprelease.consortium import make_keys
from dprelease.consortium._central import noisy_table, pooled_margins
from dprelease.consortium._container import decode
from dprelease.mechanism.noise import (
    NoiseSource,
    exact_sigma2,
    gaussian_law,
    summed_gaussian_pmf,
    summed_gaussian_variance,
)
from dprelease.publish import decide_budget, prepare

BANDS = {"column": "band", "domain": {"values": ["a", "b"]}}
MARGINS = {**MONTHLY, "group_by": [*MONTHLY["group_by"], BANDS], "margins": [["region"], []]}


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return make_keys(tmp_path_factory.mktemp("keyholder"))


def banded(seed: int) -> pl.DataFrame:
    frame = site_data(seed)
    return frame.with_columns(band=pl.Series(["a", "b"] * (frame.height // 2)))


def test_margins_pool_exactly_add_up_and_say_so(tmp_path: Path, keys: tuple[Path, Path]) -> None:
    """With zero noise every level is the pooled truth and each margin the sum of its cells;
    one share file per site holds every level; a re-run sends the same bytes; the manifest and
    consortium.json state each level's shares."""
    world = World(tmp_path, keys, spec={**MARGINS, "postprocess": {"decimals": 0}})
    frames = [banded(i) for i in range(3)]
    sent = {
        site: world.contribute(site, frame).read_bytes()
        for site, frame in zip(SITES, frames, strict=True)
    }
    assert len(list(world.inbox.glob("*.dpshare"))) == 3  # one share per site and release
    again = world.contribute("north", frames[0], NoiseSource.seeded_for_tests(9))
    assert again.read_bytes() == sent["north"]
    header = decode(sent["north"], "share").header
    assert [(m["name"], m.get("level")) for m in header["measurements"]] == [
        (name, level) for name in ("n", "cost") for level in (None, "region", "total")
    ]
    done, table = world.release()
    pooled = pl.concat(frames).with_columns(pl.col("cost").clip(0, 100))
    cells = table.filter(pl.col("level") == "region,band")
    expected = cells.select("region", "band").join(
        pooled.group_by("region", "band").agg(n=pl.len(), cost=pl.col("cost").sum()),
        on=["region", "band"],
        how="left",
    )
    assert cells["n"].to_list() == expected["n"].to_list()
    assert cells["cost"].to_list() == [float(x) for x in expected["cost"]]
    for name in ("n", "cost"):  # additive: every margin row is the sum of its cells
        by_region = cells.group_by("region").agg(pl.col(name).sum())
        regions = table.filter(pl.col("level") == "region").select("region", name)
        assert (
            regions.join(by_region, on="region", suffix="_cells")
            .select((pl.col(name) == pl.col(f"{name}_cells")).all())
            .item()
        )
        assert table.filter(pl.col("level") == "total")[name].item() == cells[name].sum()
    assert table.filter(pl.col("level") == "total")["n"].item() == pooled.height
    manifest = json.loads(done.files["manifest.json"].read_text())
    assert "every level, the cells and each margin, with its own shares" in manifest["mechanism"]
    assert (
        "sum of the contributing sites' exact discrete Gaussian shares"
        in (manifest["margins"]["margin_of_error"])
    )
    levels = manifest["statistics"][0]["levels"]
    shares = [n for n in world.plan.noise if n.name == "n"]
    assert [level["noise_variance_units_exact"] for level in levels] == [
        str(3 * n.sigma2) for n in shares
    ]
    # the budget is split over the levels exactly as a central release of the pooled rows splits
    # it: the same levels, shares, ρ and Δ per level (only the noise's law differs)
    budget = decide_budget(world.resolved, rho=world.consortium.rho, privacy=profiles(PRIVACY))
    central = prepare(pooled, world.resolved, budget, period="2025-03").manifest.to_json_dict()
    assert central["margins"]["levels"] == manifest["margins"]["levels"]
    for ours, theirs in zip(manifest["statistics"], central["statistics"], strict=True):
        assert [(x["rho_exact"], x["sensitivity_squared_units"]) for x in ours["levels"]] == [
            (x["rho_exact"], x["sensitivity_squared_units"]) for x in theirs["levels"]
        ]
    facts = json.loads(done.files["consortium.json"].read_text())
    assert [m.get("level") for m in facts["measurements"]] == [None, "region", "total"] * 2
    # every level's part of ρ, as the central release splits it, adds up to the consortium's
    assert sum(Fraction(m["rho_exact"]) for m in facts["measurements"]) == world.consortium.rho


def test_every_level_carries_the_summed_shares_law(tmp_path: Path, keys: tuple[Path, Path]) -> None:
    """Three whole releases (encrypt, add, decrypt, post-process) of 300 cells and 100 region
    margins, the margin weighted 3:1 so the two levels have different share σ²: each level's
    decrypted total noise (noisy total − truth) is χ²-consistent with the exact law of the sum
    of 3 shares of that level's σ² (false-alarm rate 1e-4 per level, 2e-4 in all); the published
    table is the central consistent table of those totals; at t = 0 each level's noise has the
    central release's variance (to 1e-5)."""
    regions = [f"r{i}" for i in range(100)]
    spec = {
        **MONTHLY,
        "group_by": [
            {"column": "region", "domain": {"values": regions}},
            {"column": "band", "domain": {"values": ["a", "b", "c"]}},
        ],
        "statistics": [{"name": "n", "kind": "count"}],
        "margins": [["region"]],
        "level_weights": [1, 3],
        "max_rows_per_unit": 1,
    }
    config = {**CONFIG, "tolerate": 0}
    noise: dict[int, list[int]] = {0: [], 1: []}
    for run in range(3):
        world = World(tmp_path / str(run), keys, spec=spec, config=config)
        for i, site in enumerate(SITES):
            frame = pl.DataFrame(
                {
                    "pid": [f"{site}{j}" for j in range(1500)],
                    "region": regions * 15,
                    "band": (["a"] * 100 + ["b"] * 100 + ["c"] * 100) * 5,
                    "day": ["2025-03-01"] * 1500,
                }
            ).with_columns(pl.col("day").str.to_date())
            world.contribute(site, frame, NoiseSource.seeded_for_tests(100 * run + i))
        done, table = world.release()
        totals = json.loads((world.root / "aggregator" / "totals.json").read_text())["totals"]
        levels = world.plan.by_measurement(totals)["n"]
        noise[0] += [v - 15 for v in levels[0]]  # 5 rows per site and cell
        noise[1] += [v - 45 for v in levels[1]]
        allocation = world.plan.pooled(3)
        central, _ = noisy_table(
            world.resolved, allocation, pooled_margins(world.resolved, allocation), {"n": levels}
        )
        assert table.equals(central)
    z = np.arange(-200, 201)
    for level, n in enumerate(world.plan.noise):
        pmf = summed_gaussian_pmf(n.sigma2, 3, z)
        assert chi2_pvalue_of_pmf(np.array(noise[level]), z, pmf) > 1e-4, level
        central = gaussian_law(exact_sigma2(n.delta2_squared / (2 * n.rho))).variance
        assert summed_gaussian_variance(n.sigma2, 3) == pytest.approx(central, rel=1e-5)
    assert world.plan.noise[0].sigma2 > 2 * world.plan.noise[1].sigma2
