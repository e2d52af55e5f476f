"""A site's step: its exact aggregates plus its noise share, encrypted, as one share file.

Exactly once: a share is drawn once per (consortium, release, spec, period) and kept in the
site's store; a re-run hands back the stored bytes, never a fresh noise share (two shares of the
same release with independent noise could be averaged, halving the noise's variance). The store
is keyed without the encryption key: a contribute under another key (a rotated or lost key, a
second key holder) is refused, since its share would need fresh noise. The store is
written before the outbox, each atomically, so a run killed at any point leaves either no share
(the next run draws the first one) or the whole stored one (the next run sends it again).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from dprelease.consortium import _container
from dprelease.consortium._central import check_site_input, exact_vectors
from dprelease.consortium._errors import ConsortiumError, ShareError
from dprelease.consortium._he import SLOT, PublicKey
from dprelease.consortium._plan import Plan
from dprelease.mechanism import DataSource
from dprelease.mechanism.noise import (
    NoiseSource,
    default_noise_source,
    distributed_gaussian_share,
    require_private,
)

SHARE_FORMAT = "dprelease-consortium-share/1"
SHARE_SUFFIX = ".dpshare"


def share_name(plan: Plan, site: str, key: PublicKey) -> str:
    """The share's file name: consortium, site, release, spec and key, so shares of different
    releases never take each other's place."""
    asset, period = plan.release_id.split("/")
    return (
        f"{plan.consortium.name}__{site}__{asset}__{period}__{plan.resolved.hash[:12]}__"
        f"{key.key_id}{SHARE_SUFFIX}"
    )


def stored_name(plan: Plan, site: str) -> str:
    """The share's name in the site's store: without the key, so a release has one stored share
    per site whatever key is offered later."""
    asset, period = plan.release_id.split("/")
    return (
        f"{plan.consortium.name}__{site}__{asset}__{period}__{plan.resolved.hash[:12]}"
        f"{SHARE_SUFFIX}"
    )


@dataclass(frozen=True)
class Contributed:
    """What `contribute` did: the share it sent (`out`), and whether it drew it now or handed
    back the one stored by an earlier run."""

    out: Path
    status: Literal["drawn", "stored"]
    size: int


def differing_fact(header: dict[str, object], facts: dict[str, object]) -> str | None:
    """The first public fact of a release that `header` states differently, else None."""
    return next((key for key, value in facts.items() if header.get(key) != value), None)


def _header(
    plan: Plan, site: str, key: PublicKey, moduli: int, engine: str, source: NoiseSource
) -> dict[str, object]:
    return {
        "format": SHARE_FORMAT,
        **plan.public_facts(),
        "site": site,
        "key_id": key.key_id,
        "moduli": moduli,
        "engine": engine,
        "noise_bits": source.bit_source,
        "noise_seeded": source.is_seeded,
    }


def contribute(
    plan: Plan,
    site: str,
    key: PublicKey,
    data: DataSource,
    *,
    store: Path,
    out: Path,
    engine: str | None = None,
    noise: NoiseSource | None = None,
    allow_unsafe_noise: bool = False,
) -> Contributed:
    """Write this site's share of `plan` to `out` (a directory), drawing it only if the store
    has none: aggregate exactly, add an exact N_Z(0, σ_s²) share per cell of each measurement
    (and per row of each of its margins), encrypt under `key`. Every refusal comes before a row
    is read."""
    source = noise or default_noise_source()
    require_private(source, allow_unsafe=allow_unsafe_noise)
    if site not in plan.consortium.sites:
        raise ConsortiumError("--site", f"{site!r} is not a site of {plan.consortium.name!r}")
    engine = engine or plan.resolved.spec.engine or "polars"
    moduli = plan.moduli_needed(key.moduli, "public key")
    name = share_name(plan, site, key)
    kept = store / stored_name(plan, site)
    if kept.exists():  # resent as stored: the input is not read again
        data_bytes = kept.read_bytes()
        stored = _container.decode(data_bytes, str(kept))
        if stored.header.get("format") != SHARE_FORMAT or stored.header.get("site") != site:
            raise ShareError(str(kept), "is not this site's stored share; move it away")
        if stored.header.get("key_id") != key.key_id:
            raise ShareError(
                "--public-key",
                f"{plan.release_id}'s share of {site!r} was drawn under key "
                f"{stored.header.get('key_id')!r}; a share is drawn once per release, so "
                "decrypt this release under that key, or release under a new spec name or period",
            )
        changed = differing_fact(stored.header, plan.public_facts())
        if changed is not None:
            raise ShareError(
                str(kept),
                f"this release's share was drawn with another {changed}; a share is drawn once "
                "per release, so release under a new spec name or period instead",
            )
        status: Literal["drawn", "stored"] = "stored"
    else:
        check_site_input(data, plan.resolved, plan.allocation, plan.period, engine)
        exact = exact_vectors(data, plan.resolved, plan.allocation, plan.period, engine)
        values: list[int] = []
        for n in plan.noise:  # each level of each measurement, in the plan's order
            shares = distributed_gaussian_share(n.sigma2, n.cells, source)
            level = exact[n.name][n.level]
            values += [x + int(z) for x, z in zip(level, shares.tolist(), strict=True)]
        del exact
        blobs = key.encrypt(values, moduli)
        del values
        header = _header(plan, site, key, moduli, engine, source)
        data_bytes = _container.encode(header, blobs, SLOT)
        _container.write(kept, data_bytes)
        status = "drawn"
    sent = out / name
    if not sent.exists() or sent.read_bytes() != data_bytes:
        _container.write(sent, data_bytes)
    return Contributed(sent, status, len(data_bytes))
