"""The consortium's Dagster code locations in process: three sites' share assets, the sensor
that starts the sum once every share is in, the key holder's decryption, the sensor that starts
the release, and what the assets show (which sites contributed; no data)."""

from __future__ import annotations

import json
from pathlib import Path

import consortium_world  # noqa: F401  (skips without TenSEAL; fails in CI)
import dagster as dg
import numpy as np
import polars as pl
import pytest

from dprelease.consortium import ConsortiumError, decrypt, make_keys
from pipelines.consortium.aggregator import (  # noqa: E402  (after the TenSEAL check)
    AggregatorSettings,
    build_aggregator_definitions,
    site_shares,
)
from pipelines.consortium.site import SiteSettings, build_site_definitions  # noqa: E402

SITES = ("north", "south", "east")
SPEC = """release:
  name: admissions
  source: admissions
  privacy_unit: pid
  max_rows_per_unit: 1
  period: {column: day, every: month, composition: sequential}
  group_by:
    - column: region
      domain: {values: [n, s]}
  statistics:
    - {name: admissions, kind: count}
"""
CONSORTIUM = "consortium:\n  name: hospitals\n  sites: [north, south, east]\n  rho: 1/10\n"
PRIVACY = "privacy:\n  profile: {kind: constant, bound: 3000}\n  measure: zcdp\n  delta: 1e-6\n"


def materialize(defs: dg.Definitions, instance: dg.DagsterInstance, name: str, partition: str):
    assets = [a for a in defs.assets if isinstance(a, dg.AssetsDefinition)]  # type: ignore[union-attr]
    return dg.materialize(assets, instance=instance, selection=[name], partition_key=partition)


def metadata(result: dg.ExecuteInProcessResult, name: str) -> dict[str, object]:
    event = result.asset_materializations_for_node(name)[0]
    return {key: value.value for key, value in event.metadata.items()}


@pytest.fixture
def world(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "spec.yaml").write_text(SPEC)
    (tmp_path / "consortium.yaml").write_text(CONSORTIUM)
    (tmp_path / "privacy.yaml").write_text(PRIVACY)
    public, secret = make_keys(tmp_path / "keyholder")
    rng = np.random.default_rng(3)
    for site in SITES:
        (tmp_path / site).mkdir()
        pl.DataFrame(
            {
                "pid": [f"{site}{i}" for i in range(50)],
                "region": rng.choice(["n", "s"], 50).tolist(),
                "day": ["2025-03-04"] * 50,
            }
        ).with_columns(pl.col("day").str.to_date()).write_parquet(
            tmp_path / site / "2025-03.parquet"
        )
    return {"root": tmp_path, "public": public, "secret": secret}


def site_defs(root: Path, public: Path, site: str) -> dg.Definitions:
    return build_site_definitions(
        SiteSettings(
            consortium_file=str(root / "consortium.yaml"),
            spec_file=str(root / "spec.yaml"),
            site=site,
            data=str(root / site / "{period}.parquet"),
            public_key=str(public),
            store=str(root / site / "store"),
            outbox=str(root / "inbox" / site),  # the channel: its outbox is its inbox folder
        )
    )


def test_sites_share_then_the_sensors_sum_and_publish(world: dict[str, Path]) -> None:
    root, public = world["root"], world["public"]
    aggregator = build_aggregator_definitions(
        AggregatorSettings(
            consortium_file=str(root / "consortium.yaml"),
            spec_file=str(root / "spec.yaml"),
            public_key=str(public),
            inbox=str(root / "inbox"),
            work=str(root / "work"),
            out=str(root / "public"),
            ledger_url=str(root / "ledger.sqlite"),
            privacy_config=str(root / "privacy.yaml"),
        )
    )
    instance = dg.DagsterInstance.ephemeral()
    shares_sensor = aggregator.resolve_sensor_def("consortium_shares_sensor")
    for site in SITES[:2]:
        done = materialize(
            site_defs(root, public, site), instance, "consortium_share", "2025-03-01"
        )
        shown = metadata(done, "consortium_share")
        assert shown["release_id"] == "admissions/2025-03" and shown["share drawn"] == "now"
        # the sensor waits for every site
        result = shares_sensor(dg.build_sensor_context(instance=instance))
        assert not result.run_requests
    materialize(site_defs(root, public, "east"), instance, "consortium_share", "2025-03-01")
    result = shares_sensor(dg.build_sensor_context(instance=instance))
    assert [r.partition_key for r in result.run_requests] == ["2025-03-01"]
    summed = materialize(aggregator, instance, "consortium_sum", "2025-03-01")
    shown = metadata(summed, "consortium_sum")
    assert shown["sites contributed"] == "east, north, south" and shown["ledger"] == "reserved"
    totals_sensor = aggregator.resolve_sensor_def("consortium_totals_sensor")
    assert not totals_sensor(dg.build_sensor_context(instance=instance)).run_requests
    sum_path = Path(str(shown["encrypted sum (for the key holder)"]))
    decrypt(world["secret"], sum_path, sum_path.with_suffix(".totals.json"))  # the key holder
    requests = totals_sensor(dg.build_sensor_context(instance=instance)).run_requests
    assert [r.partition_key for r in requests] == ["2025-03-01"]
    released = materialize(aggregator, instance, "consortium_release", "2025-03-01")
    shown = metadata(released, "consortium_release")
    assert shown["sites contributed"] == "east, north, south" and shown["status"] == "committed now"
    folder = root / "public" / "admissions__2025-03"
    assert pl.read_csv(folder / "release.csv").height == 2
    facts = folder.with_name(f"{folder.name}.consortium.json")
    assert json.loads(facts.read_text())["missing"] == []
    # a site's re-run resends its stored share; the published release does not change
    again = materialize(
        site_defs(root, public, "north"), instance, "consortium_share", "2025-03-01"
    )
    assert metadata(again, "consortium_share")["share drawn"] == "earlier (resent)"
    # a share in another site's folder did not come through that site's channel: refused
    stray = next((root / "inbox" / "north").glob("*.dpshare"))
    (root / "inbox" / "south" / stray.name).write_bytes(stray.read_bytes())
    with pytest.raises(ConsortiumError, match="is not a share of 'south'"):
        site_shares(root / "inbox", SITES)


def test_the_main_code_location_does_not_import_the_consortium() -> None:
    main = Path(__file__).resolve().parents[2] / "pipelines"
    for module in main.glob("*.py"):
        assert "consortium" not in module.read_text(), module
