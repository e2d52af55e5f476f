"""The independent privacy review's findings (PRIVACY.md, "Consortium releases": the review), each
as the attack or the accounting hole the reviewer reproduced, now refused: a share copied under
another site's name (C1), `ledger void` after the sum left for the key holder (C2), fresh noise
shares or a second sum under another key or output folder (C3), seeded shares reaching a release
(C8) and two consortia sharing a key holder (C9)."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest
from consortium_world import CONFIG, SITES, World, site_data
from helpers import invoke_cli

from dprelease.consortium import ShareError, _container, aggregate, contribute, decrypt, make_keys
from dprelease.errors import LedgerError
from dprelease.mechanism.noise import NoiseSource


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return make_keys(tmp_path_factory.mktemp("keyholder"))


@pytest.fixture(scope="module")
def rotated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return make_keys(tmp_path_factory.mktemp("keyholder2"))


def test_a_share_copied_under_another_sites_name_is_refused(
    tmp_path: Path, keys: tuple[Path, Path]
) -> None:
    """C1: east's ciphertexts resent as north's share (header relabelled) would add east's data
    twice; BFV encryption is randomized, so a byte-identical ciphertext is a copy."""
    world = World(tmp_path, keys)
    for i, site in enumerate(SITES[1:], start=1):
        world.contribute(site, site_data(i))
    east = _container.read(next(world.inbox.glob("*__east__*")))
    forged = world.inbox / "hospitals__north__forged.dpshare"
    _container.write(forged, _container.encode({**east.header, "site": "north"}, east.blobs))
    with pytest.raises(ShareError, match="holds a ciphertext of 'east'"):
        world.aggregate()
    assert world.ledger.status() == []  # nothing charged, no scope made


def test_void_is_refused_once_the_sum_left_for_the_key_holder(
    tmp_path: Path, keys: tuple[Path, Path]
) -> None:
    """C2: the decrypted totals leave before commit, so the charge is sealed when the sum is
    written: `ledger void` (library and command) gives nothing back."""
    world = World(tmp_path, keys)
    for i, site in enumerate(SITES):
        world.contribute(site, site_data(i))
    summed = world.aggregate()
    decrypt(keys[1], summed.sum_path, tmp_path / "totals.json", log=tmp_path / "k.log")
    with pytest.raises(LedgerError, match="sealed"):
        world.ledger.void(world.plan.release_id, reason="failed run")
    ledger = str(tmp_path / "aggregator" / "ledger.sqlite")
    done = invoke_cli("ledger", "void", world.plan.release_id, "--reason", "x", "--ledger", ledger)
    assert done.exit_code != 0 and "sealed" in done.output, done.output
    spent = world.ledger.status(world.consortium.ledger_scope)[0].spent
    assert spent == Fraction(1, 10)


def test_a_key_change_draws_no_fresh_noise_share(
    tmp_path: Path, keys: tuple[Path, Path], rotated: tuple[Path, Path]
) -> None:
    """C3: a site's share is stored per release whatever the key: under a new key it is
    refused, never drawn again (two noisy totals of one charge could be averaged)."""
    world = World(tmp_path, keys)
    world.contribute("north", site_data(0))
    second = World(tmp_path, rotated)
    with pytest.raises(ShareError, match="drawn under key"):
        contribute(
            second.plan,
            "north",
            second.key,
            site_data(0),
            store=tmp_path / "north" / "store",
            out=tmp_path / "inbox2",
            noise=NoiseSource.zero_for_tests(),
            allow_unsafe_noise=True,
        )
    assert not (tmp_path / "inbox2").exists()


def test_the_ledger_holds_the_one_sum_of_a_release_whatever_the_output_folder(
    tmp_path: Path, keys: tuple[Path, Path]
) -> None:
    """C3: the shares summed are sealed on the charge, so a resumed charge with another set of
    shares (written to a fresh --out, where no earlier sum is found) is refused."""
    world = World(tmp_path, keys)
    for i, site in enumerate(SITES):
        world.contribute(site, site_data(i))
    world.aggregate()
    fewer = sorted(p for p in world.inbox.glob("*.dpshare") if "__east__" not in p.name)
    with pytest.raises(ShareError, match="ledger sealed"):
        aggregate(
            world.plan,
            world.key,
            fewer,
            ledger=world.ledger,
            budget=world.budget,
            out=tmp_path / "elsewhere",
            allow_missing=True,
            allow_unsafe_noise=True,
        )
    assert not (tmp_path / "elsewhere").exists()
    again = world.aggregate()  # the same shares: resumed, one charge
    assert again.status == "resumed"


def test_seeded_noise_shares_are_refused_by_the_aggregator(
    tmp_path: Path, keys: tuple[Path, Path]
) -> None:
    """C8: a share whose header says its noise was seeded (a test source) never reaches a
    release unless the aggregator too is told it is a test."""
    world = World(tmp_path, keys)
    for i, site in enumerate(SITES):
        world.contribute(site, site_data(i))
    with pytest.raises(ShareError, match="seeded"):
        world.aggregate(allow_unsafe_noise=False)
    assert world.ledger.status() == []


def test_one_key_holder_decrypts_a_sum_of_each_consortium(
    tmp_path: Path, keys: tuple[Path, Path]
) -> None:
    """C9: the key holder's log is keyed by (consortium, release): two consortia with the same
    spec and period each get their one sum decrypted; a second sum of one is still refused."""
    log = tmp_path / "keyholder.log"
    sums = []
    for name in ("hospitals", "clinics"):
        world = World(tmp_path / name, keys, config={**CONFIG, "name": name})
        for i, site in enumerate(SITES):
            world.contribute(site, site_data(i))
        sums.append(world.aggregate().sum_path)
        decrypt(keys[1], sums[-1], tmp_path / f"{name}.json", log=log)
    data = bytearray(sums[0].read_bytes())
    data[-5] ^= 1
    (tmp_path / "forged.dpsum").write_bytes(bytes(data))
    with pytest.raises(ShareError, match="decrypted already"):
        decrypt(keys[1], tmp_path / "forged.dpsum", tmp_path / "t.json", log=log)
