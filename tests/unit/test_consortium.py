"""A consortium release through the library, three sites in one process (the command line with
separate processes is tests/system/test_consortium_cli.py): exactness of the encrypted sum,
what a share file holds, exactly-once across sites, and every refusal."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from consortium_world import (
    CONFIG,
    MONTHLY,
    SITES,
    World,
    parse_privacy_profiles,
    public,
    site_data,
    truth,
)
from helpers import ROOT, chi2_pvalue_of_pmf, make_spec

from dprelease.consortium import (
    ConsortiumError,
    SecretKey,
    ShareError,
    aggregate,
    contribute,
    decrypt,
    make_keys,
    parse_consortium,
    plan_release,
)
from dprelease.consortium._he import crt
from dprelease.mechanism.noise import NoiseSource, summed_gaussian_moe95, summed_gaussian_pmf
from dprelease.publish import decide_budget


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return make_keys(tmp_path_factory.mktemp("keyholder"))


@pytest.fixture(scope="module")
def other_keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return make_keys(tmp_path_factory.mktemp("other-keyholder"))


def test_three_sites_pool_exactly(tmp_path: Path, keys: tuple[Path, Path]) -> None:
    """With zero noise the published counts and sums are the pooled truth: encryption, the sum
    under encryption, CRT decoding and post-processing lose nothing."""
    world = World(tmp_path, keys, spec={**MONTHLY, "postprocess": {"decimals": 0}})
    frames = [site_data(i) for i in range(3)]
    for site, frame in zip(SITES, frames, strict=True):
        world.contribute(site, frame)
    done, table = world.release()
    expected = truth(frames)
    assert table["n"].to_list() == expected["n"]
    assert table["cost"].to_list() == [float(x) for x in expected["cost"]]
    manifest = json.loads(done.files["manifest.json"].read_text())
    assert "distributed discrete Gaussian" in manifest["mechanism"]
    assert manifest["privacy_unit"].startswith("pid within a site")
    assert manifest["rho_total_exact"] == "1/10"
    facts = json.loads(done.files["consortium.json"].read_text())
    assert facts["contributed"] == sorted(SITES) and facts["missing"] == []


def test_crt_decodes_every_integer_the_engines_can_pool(keys: tuple[Path, Path]) -> None:
    key, secret = public(keys[0]), SecretKey.parse(keys[1].read_bytes(), "secret")
    values = [0, 1, -1, 2**100, -(2**100), 3 * 2**116 + 12345, -(3 * 2**116)]
    blobs = key.encrypt(values, 3)
    assert secret.decrypt(blobs, 3, len(values)) == values
    assert crt([[5], [5]], [7, 11]) == [5] and crt([[6], [10]], [7, 11]) == [-1]


def test_counts_need_two_primes_and_wide_sums_three(
    tmp_path: Path, keys: tuple[Path, Path]
) -> None:
    """A count adds 1 per row, a sum up to U units, below 2^63 rows each: two 60-bit primes
    hold 3 sites' counts; a plan whose pooled bound passes their product needs a third, and one
    beyond all three is refused (the sampler's σ² ≤ 2^48 keeps real specs far below it)."""
    world = World(tmp_path, keys)
    assert world.plan.moduli_needed(world.key.moduli, "key") == 2
    p1, p2, p3 = world.key.moduli

    def with_units(units: int) -> Any:
        noise = tuple(dataclasses.replace(n, units_bound=units) for n in world.plan.noise)
        return dataclasses.replace(world.plan, noise=noise)

    edge = (p1 * p2) // (2 * 3 * 2**63)  # 2·3·2^63·(U + 1) just above P = p1·p2
    assert with_units(edge - 2).moduli_needed(world.key.moduli, "key") == 2
    assert with_units(edge).moduli_needed(world.key.moduli, "key") == 3
    with pytest.raises(ConsortiumError, match="cannot hold"):
        with_units(p1 * p2 * p3).moduli_needed(world.key.moduli, "key")


def test_a_share_holds_no_plaintext_and_its_size_is_public(
    tmp_path: Path, keys: tuple[Path, Path], other_keys: tuple[Path, Path]
) -> None:
    world = World(tmp_path, keys)
    small, large = site_data(1, rows=5), site_data(2, rows=300)
    first = world.contribute("north", small).read_bytes()
    other = World(tmp_path / "b", keys)
    second = other.contribute("north", large).read_bytes()
    assert len(first) == len(second)  # two tables, one size: it depends on public facts only
    exact = truth([large])
    from dprelease.consortium._container import decode

    container = decode(second, "share")
    # the header holds public facts only: the release's, the site's name, the key, the engine
    public_keys = set(world.plan.public_facts()) | {
        "format",
        "site",
        "key_id",
        "moduli",
        "engine",
        "noise_bits",
        "noise_seeded",
        "slot",
        "blobs",
    }
    assert set(container.header) == public_keys
    assert {k: container.header[k] for k in world.plan.public_facts()} == (
        other.plan.public_facts()
    )
    # no exact aggregate (nor its residue) is in the ciphertexts as a 64-bit integer
    for value in (v for v in exact["cost"] if v >= 1000):
        for blob in container.blobs:
            assert value.to_bytes(8, "little", signed=True) not in blob
    # the share decrypts with the key (zero noise: the site's exact table) and only with it
    secret = SecretKey.parse(keys[1].read_bytes(), "secret")
    assert secret.decrypt(container.blobs, 2, 6)[:3] == exact["n"]
    wrong = SecretKey.parse(other_keys[1].read_bytes(), "other")
    assert wrong.decrypt(container.blobs, 2, 6)[:3] != exact["n"]


def test_a_rerun_sends_the_stored_share_never_fresh_noise(
    tmp_path: Path, keys: tuple[Path, Path]
) -> None:
    world = World(tmp_path, keys)
    data = site_data(3)
    path = world.contribute("north", data, NoiseSource.seeded_for_tests(1))
    first = path.read_bytes()
    path.unlink()  # lost in transit: the re-run sends it again, byte for byte
    again = contribute(
        world.plan,
        "north",
        world.key,
        tmp_path / "moved-away.parquet",  # the input is not read again to resend
        store=tmp_path / "north" / "store",
        out=world.inbox,
        noise=NoiseSource.seeded_for_tests(2),
        allow_unsafe_noise=True,
    )
    assert again.status == "stored" and again.out.read_bytes() == first


def test_refusals_of_shares(
    tmp_path: Path, keys: tuple[Path, Path], other_keys: tuple[Path, Path]
) -> None:
    world = World(tmp_path, keys)
    for i, site in enumerate(SITES):
        world.contribute(site, site_data(i))
    # a replay of another period's share
    april = World(tmp_path / "april", keys, period="2025-04")
    replay = april.contribute("east", site_data(9, day="2025-04-02"))
    moved = world.inbox / ("x" + replay.name)
    moved.write_bytes(replay.read_bytes())
    with pytest.raises(ShareError, match="another release_id"):
        world.aggregate()
    moved.unlink()
    # a share of another spec
    changed = World(tmp_path / "spec", keys, spec={**MONTHLY, "max_rows_per_unit": 3})
    cross = changed.contribute("east", site_data(9))
    (world.inbox / ("y" + cross.name)).write_bytes(cross.read_bytes())
    with pytest.raises(ShareError, match="another spec_hash"):
        world.aggregate()
    (world.inbox / ("y" + cross.name)).unlink()
    # a share under another key
    foreign = World(tmp_path / "key", other_keys)
    alien = foreign.contribute("east", site_data(9))
    (world.inbox / ("z" + alien.name)).write_bytes(alien.read_bytes())
    with pytest.raises(ShareError, match="encrypted under key"):
        world.aggregate()
    (world.inbox / ("z" + alien.name)).unlink()
    # a second, different share from one site
    twice = World(tmp_path / "twice", keys).contribute("east", site_data(8))
    (world.inbox / ("w" + twice.name)).write_bytes(twice.read_bytes())
    with pytest.raises(ShareError, match="second, different share"):
        world.aggregate()
    (world.inbox / ("w" + twice.name)).unlink()
    # a corrupted ciphertext
    victim = next(world.inbox.glob("*east*"))
    good = victim.read_bytes()
    victim.write_bytes(good[:-400_000] + bytes(400_000))
    with pytest.raises(ShareError, match="not a BFV ciphertext"):
        world.aggregate()
    victim.write_bytes(good[:-10])
    with pytest.raises(ShareError, match="truncated"):
        world.aggregate()
    assert world.ledger.stored_release(world.plan.release_id) is None


def test_missing_sites_refuse_or_proceed_within_t(tmp_path: Path, keys: tuple[Path, Path]) -> None:
    world = World(tmp_path, keys)
    world.contribute("north", site_data(0))
    with pytest.raises(ShareError, match="no share from south, east; wait for them \\(at most"):
        world.aggregate(allow_missing=True)
    world.contribute("south", site_data(1))
    with pytest.raises(ShareError, match="or pass --allow-missing"):
        world.aggregate()
    done, _ = world.release(allow_missing=True)
    facts = json.loads(done.files["consortium.json"].read_text())
    assert facts["missing"] == ["east"] and facts["colluding_sites_tolerated_now"] == 0
    manifest = json.loads(done.files["manifest.json"].read_text())
    assert "missing: east" in manifest["mechanism"]


def test_charged_once_and_late_shares_refused(tmp_path: Path, keys: tuple[Path, Path]) -> None:
    world = World(tmp_path, keys)
    for i, site in enumerate(SITES[:2]):
        world.contribute(site, site_data(i))
    first = world.aggregate(allow_missing=True)
    again = world.aggregate(allow_missing=True)
    assert (first.status, again.status) == ("reserved", "resumed")
    world.contribute("east", site_data(2))  # arrives after the sum was made
    with pytest.raises(ShareError, match="late or replaced share"):
        world.aggregate()
    (world.inbox / next(p.name for p in world.inbox.glob("*east*"))).unlink()
    done, table = world.release(allow_missing=True)
    rerun, same = world.release(allow_missing=True)
    assert (done.status, rerun.status) == ("committed now", "already released")
    assert table.equals(same)
    status = world.ledger.status(world.consortium.ledger_scope)[0]
    assert status.spent == Fraction(1, 10)  # one charge for all of it
    world.contribute("east", site_data(2))
    with pytest.raises(ShareError, match="late or replaced"):
        world.aggregate(allow_missing=True)


def test_the_key_holder_decrypts_one_sum_per_release(
    tmp_path: Path, keys: tuple[Path, Path]
) -> None:
    world = World(tmp_path, keys)
    for i, site in enumerate(SITES):
        world.contribute(site, site_data(i))
    summed = world.aggregate()
    log = tmp_path / "keyholder.log"
    decrypt(keys[1], summed.sum_path, tmp_path / "t.json", log=log)
    decrypt(keys[1], summed.sum_path, tmp_path / "t2.json", log=log)  # the same sum: fine
    forged = tmp_path / "forged.dpsum"
    data = bytearray(summed.sum_path.read_bytes())
    data[-5] ^= 1
    forged.write_bytes(bytes(data))
    with pytest.raises(ShareError, match="decrypted already"):
        decrypt(keys[1], forged, tmp_path / "t3.json", log=log)


def test_public_refusals(tmp_path: Path, keys: tuple[Path, Path]) -> None:
    consortium = parse_consortium(CONFIG)
    median = {"name": "med", "kind": "quantile", "column": "cost", "lower": 0, "upper": 100}
    median.update(resolution=1, p=0.5)
    quantiles = {**MONTHLY, "statistics": [*MONTHLY["statistics"], median]}
    with pytest.raises(ConsortiumError, match=r"release.statistics\[2\]"):
        plan_release(consortium, make_spec(quantiles), "2025-03")
    with pytest.raises(ConsortiumError, match="consortium.tolerate"):
        parse_consortium({**CONFIG, "tolerate": 3})
    with pytest.raises(ConsortiumError, match="consortium.colour"):
        parse_consortium({**CONFIG, "colour": 1})
    pure = parse_privacy_profiles({"profile": {"kind": "constant", "bound": 3000}})
    world = World(tmp_path, keys)
    budget = decide_budget(
        world.resolved, scope="pure", ledger=world.ledger, privacy=pure, epsilon=Fraction(1, 2)
    )
    with pytest.raises(ConsortiumError, match="use a zCDP scope"):
        aggregate(world.plan, world.key, [], ledger=world.ledger, budget=budget, out=tmp_path)
    with pytest.raises(ConsortiumError, match="--site"):
        world.contribute("west", site_data(0))


def test_a_person_in_k_sites_multiplies_delta(tmp_path: Path, keys: tuple[Path, Path]) -> None:
    one = plan_release(parse_consortium(CONFIG), make_spec(MONTHLY), "2025-03")
    two = plan_release(
        parse_consortium({**CONFIG, "max_sites_per_unit": 2}), make_spec(MONTHLY), "2025-03"
    )
    for a, b in zip(one.noise, two.noise, strict=True):
        assert (b.delta1, b.delta2_squared) == (2 * a.delta1, 4 * a.delta2_squared)
        assert b.sigma2 == pytest.approx(4 * a.sigma2, rel=1e-5)


def test_the_total_noise_of_full_releases_has_the_pooled_law(
    tmp_path: Path, keys: tuple[Path, Path]
) -> None:
    """Whole releases (encrypt, add, decrypt, post-process) with seeded site noise on known data:
    released count − true count over 300 cells × 4 releases is χ²-consistent with the sum of 3
    shares (false-alarm rate 1e-4)."""
    regions = [f"r{i}" for i in range(300)]
    spec = {
        **MONTHLY,
        "group_by": [{"column": "region", "domain": {"values": regions}}],
        "statistics": [{"name": "n", "kind": "count"}],
        "max_rows_per_unit": 1,
    }
    noise: list[int] = []
    for run in range(4):
        world = World(tmp_path / str(run), keys, spec=spec, config={**CONFIG, "tolerate": 0})
        frames = []
        for i, site in enumerate(SITES):
            frame = pl.DataFrame(
                {
                    "pid": [f"{site}{j}" for j in range(3000)],
                    "region": regions * 10,
                    "day": ["2025-03-01"] * 3000,
                }
            )
            frame = frame.with_columns(pl.col("day").str.to_date())
            frames.append(frame)
            world.contribute(site, frame, NoiseSource.seeded_for_tests(1000 * run + i))
        _, table = world.release()
        noise += [released - 30 for released in table["n"].to_list()]
    z = np.arange(-200, 201)
    sigma2 = world.plan.noise[0].sigma2
    pvalue = chi2_pvalue_of_pmf(np.array(noise), z, summed_gaussian_pmf(sigma2, 3, z))
    assert pvalue > 1e-4


def test_the_plan_is_the_same_at_every_party() -> None:
    consortium = parse_consortium(CONFIG)
    a = plan_release(consortium, make_spec(MONTHLY), "2025-03")
    b = plan_release(dataclasses.replace(consortium), make_spec(MONTHLY), "2025-03")
    assert a.public_facts() == b.public_facts()


def test_a_crash_between_store_and_outbox_resends_the_stored_share(
    tmp_path: Path, keys: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run that dies after storing its share (here: the outbox write fails) leaves the stored
    share, which the next run sends; one that dies while storing leaves nothing (atomic writes),
    and the next run draws the first share. (SIGKILL of real processes: test_consortium_cli.)"""
    from dprelease.consortium import _site

    world = World(tmp_path, keys)
    real_write = _site._container.write
    calls: list[Path] = []

    def dies_on(which: int) -> Any:
        def write(path: Path, data: bytes, **options: Any) -> None:
            calls.append(path)
            if len(calls) == which:
                raise OSError("killed")
            real_write(path, data, **options)

        return write

    monkeypatch.setattr(_site._container, "write", dies_on(1))  # dies storing: nothing left
    with pytest.raises(OSError):
        world.contribute("north", site_data(0), NoiseSource.seeded_for_tests(5))
    assert not list((tmp_path / "north").rglob("*.dpshare"))
    calls.clear()
    monkeypatch.setattr(_site._container, "write", dies_on(2))  # stored, then dies sending
    with pytest.raises(OSError):
        world.contribute("north", site_data(0), NoiseSource.seeded_for_tests(6))
    stored = next((tmp_path / "north" / "store").glob("*.dpshare")).read_bytes()
    monkeypatch.setattr(_site._container, "write", real_write)
    sent = world.contribute("north", site_data(0), NoiseSource.seeded_for_tests(7))
    assert sent.read_bytes() == stored


def test_ci_and_the_readme_command_run_these_tests() -> None:
    """`python3 dev.py test` (the README's command, and .ci/run's) installs the consortium
    extra, so these tests run there instead of skipping (consortium_world fails under CI)."""
    spec = importlib.util.spec_from_file_location("dev", ROOT / "dev.py")
    assert spec is not None and spec.loader is not None
    dev = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dev)
    assert "consortium" in dev.TEST_EXTRAS
    assert "python3 dev.py test" in (ROOT / ".ci" / "run").read_text()
    assert "python3 dev.py test" in (ROOT / "README.md").read_text()


def test_the_manifest_states_the_pooled_law_for_every_kind(
    tmp_path: Path, keys: tuple[Path, Path]
) -> None:
    """The manifest's margins of error are the exact law of the sum of the contributing sites'
    shares (not one discrete Gaussian), for a count, a sum, a mean, a ratio and a share, whose
    measurement keeps its own row recipe (the indicator of the categories): with zero noise the
    pooled share is the pooled truth."""
    cheap = {"name": "cheap", "kind": "share", "column": "cost", "categories": [1, 2, 3]}
    mean = {"name": "avg", "kind": "mean", "column": "cost", "lower": 0, "upper": 100}
    side = {"column": "cost", "lower": 0, "upper": 100}
    ratio = {
        **{"name": "r", "kind": "ratio", "lower": 0, "upper": 2},
        **{"numerator": side, "denominator": side},
    }
    statistics = [*MONTHLY["statistics"], mean, cheap, ratio]
    world = World(tmp_path, keys, spec={**MONTHLY, "statistics": statistics})
    frames = [site_data(i).with_columns(pl.col("cost") % 6) for i in range(3)]
    for site, frame in zip(SITES, frames, strict=True):
        world.contribute(site, frame)
    done, table = world.release()
    pooled = pl.concat(frames)
    expected = [
        pooled.filter(pl.col("region") == r).select(pl.col("cost").is_in([1, 2, 3]).mean()).item()
        for r in ("n", "s", "e")
    ]
    assert table["cheap"].to_list() == pytest.approx(expected, abs=0.005)  # rounded to 0.01
    manifest = json.loads(done.files["manifest.json"].read_text())
    by_name = {entry["name"]: entry for entry in manifest["statistics"]}
    count = next(n for n in world.plan.noise if n.name == "n")
    assert by_name["n"]["moe95"] == summed_gaussian_moe95(count.sigma2, 3)
    assert manifest["rho_total_exact"] == "1/10"
    assert set(by_name) == {"n", "cost", "avg", "cheap", "r"}
    for entry in by_name.values():  # each the sum of the shares (before: one central draw)
        assert entry["mechanism"].startswith("distributed discrete Gaussian: the sum of 3 sites'")
    assert table["r"].to_list() == pytest.approx([1.0, 1.0, 1.0])  # Σcost / Σcost, exactly


def test_publication_options_are_applied_to_the_pooled_table(
    tmp_path: Path, keys: tuple[Path, Path]
) -> None:
    """The spec's rounding base (post-processing of the noisy totals, as in a central release)
    is applied to a consortium release too: every count a multiple of 5, said in the manifest."""
    world = World(tmp_path, keys, spec={**MONTHLY, "postprocess": {"round_to": 5}})
    for i, site in enumerate(SITES):
        world.contribute(site, site_data(i))
    done, table = world.release()
    assert all(n % 5 == 0 for n in table["n"].to_list())
    manifest = json.loads(done.files["manifest.json"].read_text())
    assert manifest["publication"] is not None and "5" in json.dumps(manifest["publication"])
