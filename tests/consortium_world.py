"""Three consortium sites, an aggregator and a key holder in one process, each in its own
directory: the world tests/unit/test_consortium*.py release through (the library's path).

Importing it skips the importing test module without TenSEAL (the `[consortium]` extra), except
under CI, where it fails: CI must really run the consortium tests (`dev.py test` installs the
extra, as it does the Spark one).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from helpers import BASE_SPEC, make_spec

from dprelease.budget import PrivacyConfig, PrivacyProfiles
from dprelease.consortium import (
    PublicKey,
    aggregate,
    contribute,
    decrypt,
    parse_consortium,
    plan_release,
    publish,
)
from dprelease.ledger import Ledger
from dprelease.mechanism.noise import NoiseSource
from dprelease.publish import decide_budget

if os.environ.get("CI"):
    import tenseal  # noqa: F401  (CI installs the extra: without it, this fails)
else:
    pytest.importorskip("tenseal", reason="the [consortium] extra is not installed")

SITES = ("north", "south", "east")
CONFIG = {"name": "hospitals", "sites": list(SITES), "rho": "1/10", "tolerate": 1}
PRIVACY = {"profile": {"kind": "constant", "bound": 3000}, "measure": "zcdp", "delta": 1e-6}


def parse_privacy_profiles(section: dict[str, Any]) -> PrivacyProfiles:
    return PrivacyProfiles(PrivacyConfig.from_mapping(section, path_prefix="privacy"), {})


MONTHLY = {**BASE_SPEC, "period": {"column": "day", "every": "month", "composition": "sequential"}}


def public(path: Path) -> PublicKey:
    return PublicKey.parse(path.read_bytes(), str(path))


def site_data(seed: int, rows: int = 60, day: str = "2025-03-05") -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    return pl.DataFrame(
        {
            "pid": [f"p{seed}-{i}" for i in range(rows)],
            "region": rng.choice(["n", "s", "e"], rows).tolist(),
            "cost": rng.integers(0, 120, rows).tolist(),
            "day": [day] * rows,
        }
    ).with_columns(pl.col("day").str.to_date())


def truth(frames: list[pl.DataFrame]) -> dict[str, list[int]]:
    pooled = pl.concat(frames).with_columns(pl.col("cost").clip(0, 100))
    grid = pl.DataFrame({"region": ["n", "s", "e"]})
    agg = grid.join(
        pooled.group_by("region").agg(n=pl.len(), cost=pl.col("cost").sum()),
        on="region",
        how="left",
    ).fill_null(0)
    return {"n": agg["n"].to_list(), "cost": agg["cost"].to_list()}


class World:
    """Three sites, an aggregator and a key holder, each with its own directory."""

    def __init__(
        self,
        root: Path,
        keys: tuple[Path, Path],
        config: dict[str, Any] = CONFIG,
        spec: dict[str, Any] = MONTHLY,
        period: str | None = "2025-03",
    ) -> None:
        self.root, (self.public_path, self.secret_path) = root, keys
        self.key = public(self.public_path)
        self.consortium = parse_consortium(config)
        self.resolved = make_spec(spec)
        self.plan = plan_release(self.consortium, self.resolved, period)
        self.ledger = Ledger(str(root / "aggregator" / "ledger.sqlite"), mode="create")
        self.budget = decide_budget(
            self.resolved,
            scope=self.consortium.ledger_scope,
            ledger=self.ledger,
            privacy=parse_privacy_profiles(PRIVACY),
            rho=self.consortium.rho,
        )
        self.inbox = root / "inbox"

    def contribute(self, site: str, data: pl.DataFrame, noise: NoiseSource | None = None) -> Path:
        return contribute(
            self.plan,
            site,
            self.key,
            data,
            store=self.root / site / "store",
            out=self.inbox,
            noise=noise or NoiseSource.zero_for_tests(),
            allow_unsafe_noise=True,
        ).out

    def aggregate(self, **options: Any) -> Any:
        shares = sorted(self.inbox.glob("*.dpshare"))
        return aggregate(
            self.plan,
            self.key,
            shares,
            ledger=self.ledger,
            budget=self.budget,
            out=self.root / "aggregator",
            **{"allow_unsafe_noise": True, **options},
        )

    def release(self, **options: Any) -> tuple[Any, pl.DataFrame]:
        summed = self.aggregate(**options)
        totals = self.root / "aggregator" / "totals.json"
        decrypt(self.secret_path, summed.sum_path, totals, log=self.root / "keyholder.log")
        done = publish(
            self.plan,
            summed.sum_path,
            totals,
            ledger=self.ledger,
            budget=self.budget,
            out=self.root / "release",
        )
        return done, pl.read_parquet(done.files["release.parquet"])
